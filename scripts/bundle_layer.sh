#!/usr/bin/env bash
# Vendors the worker Lambda's dependencies into a layer directory, without Docker.
#
#   scripts/bundle_layer.sh UV PYTHON OUTDIR      (make bundle: PYTHON=.venv/bin/python, OUTDIR=build/layer)
#
# The versions come from uv.lock (the `lambda` dependency group), so the deployed Powertools is exactly the
# version the tests ran against. uv installs prebuilt wheels for the Lambda target (CPython 3.13 on arm64,
# Amazon Linux 2023), whatever machine runs this; a dependency without such a wheel fails the bundle
# instead of shipping a module built for the wrong machine. Re-running with an unchanged lock is a no-op.
# PYTHON (the project's venv, the runtime's version) compiles the layer's bytecode, hash-based: Lambda's code
# directories are read-only, so without it every cold start compiles every module it imports.
#
# Keep TARGET_PYTHON / TARGET_PLATFORM in step with infra/worker_code.py (RUNTIME and ARCHITECTURE).
set -euo pipefail

usage="usage: $0 UV PYTHON OUTDIR"
uv=$(realpath "${1:?$usage}")
python=$(realpath -s "${2:?$usage}")
out=$(realpath -m "${3:?$usage}")
cd "$(dirname "$0")/.."

TARGET_PYTHON=3.13
# Lambda's python3.13 runtime is Amazon Linux 2023: glibc 2.34, arm64 (the functions' architecture).
TARGET_PLATFORM=aarch64-manylinux_2_34
# The runtime ships boto3 and its dependencies; vendoring them would shadow the runtime's own copies and
# make the layer ten times bigger. Everything else (Powertools, the X-Ray SDK, jmespath, wrapt, ...) is
# vendored at the locked version.
PROVIDED_BY_RUNTIME='^(boto3|botocore|s3transfer|urllib3|python-dateutil|six)=='

compiler=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [[ "$compiler" != "$TARGET_PYTHON" ]]; then
    echo "bundle: $python is Python $compiler; the layer's bytecode must be compiled by $TARGET_PYTHON" >&2
    exit 1
fi

requirements=$("$uv" export --locked --only-group lambda --no-hashes --no-emit-project --no-header \
    --no-annotate --quiet | grep -Ev "$PROVIDED_BY_RUNTIME" | grep -Ev '^\s*(#|$)')

stamp=$(printf '%s\n' "$TARGET_PYTHON" "$TARGET_PLATFORM" "$requirements" "$(cat "$0")" | sha256sum | cut -d' ' -f1)
if [[ -d "$out/python" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$stamp" ]]; then
    echo "bundle: $out is up to date"
    exit 0
fi

# Build beside the target and swap at the end: an interrupted run never leaves a half-filled layer.
staging="$out.tmp"
rm -rf "$staging"
mkdir -p "$staging"
printf '%s\n' "$requirements" >"$staging/requirements.txt"
"$uv" pip install --quiet --target "$staging/python" \
    --python-version "$TARGET_PYTHON" --python-platform "$TARGET_PLATFORM" \
    --only-binary :all: --no-deps --no-compile -r "$staging/requirements.txt"
# Bytecode by the runtime's version, hash-based and unchecked: zipping resets timestamps, and nothing ever
# changes the sources under a deployed layer.
find "$staging/python" -name __pycache__ -type d -prune -exec rm -rf {} +
"$python" -m compileall -q -j 0 --invalidation-mode unchecked-hash "$staging/python" >/dev/null
echo "$stamp" >"$staging/.stamp"
rm -rf "$out"
mv "$staging" "$out"
echo "bundle: $(wc -l <"$out/requirements.txt") packages for CPython $TARGET_PYTHON on $TARGET_PLATFORM in $out"
