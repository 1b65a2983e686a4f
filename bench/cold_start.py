"""Benchmark (a'): cold import of the deployed assets, with and without their precompiled bytecode.

Lays out what Lambda runs, twice: the worker's code asset (staged by the same function synth uses) and the
dependencies layer (build/layer, from `make bundle`), once as shipped (with `.pyc`) and once with every `.pyc`
removed. Below both sits a stand-in for the Lambda runtime's own boto3, compiled, shared by the two layouts, as
the runtime's is. Each run is a fresh interpreter that writes no bytecode (-B: Lambda's code directory is
read-only), has no site-packages (-S) and imports the handler's module `sqs_jobs.worker.entry` from
code, layer, runtime in Lambda's order; the figure is the import's wall time. The two layouts alternate.

    python -m bench.cold_start [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import compileall
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from infra.project import LAYER_DIR, code_dirs
from sqs_jobs.cdk.asset_staging import EXCLUDED, RUNTIME_MODULES, check_interpreter, stage

LAYER = LAYER_DIR / "python"
HANDLER_MODULE = "sqs_jobs.worker.entry"
# The first invocation loads the catalog its function names (JOBS_CATALOG): part of every cold start.
CATALOG_MODULE = "functions.catalog"

# Times the import, then checks that the worker, Powertools and boto3 came from the layout's code, layer and
# runtime directories, so a stray path can't flatter either figure.
PROBE = (
    "import sys, time\n"
    "task, layer, runtime = sys.argv[1:4]\n"
    "sys.path[:0] = [task, layer, runtime]\n"
    "t = time.perf_counter()\n"
    f"import {HANDLER_MODULE}, {CATALOG_MODULE}\n"
    "elapsed = (time.perf_counter() - t) * 1000\n"
    "for module, where in (('functions', task), ('sqs_jobs', layer), ('aws_lambda_powertools', layer),"
    " ('boto3', runtime)):\n"
    "    assert sys.modules[module].__file__.startswith(where), (module, sys.modules[module].__file__)\n"
    "print(elapsed)\n"
)


class LayerNotBuiltError(RuntimeError):
    """build/layer is missing: the benchmark measures the layer `make bundle` builds."""


def _runtime_stand_in(target: Path) -> None:
    """boto3 and its dependencies from this venv, compiled, as the Lambda runtime ships them."""
    for name in RUNTIME_MODULES:  # what the Lambda Python runtime provides itself, precompiled there
        module = __import__(name)
        source = Path(module.__file__ or "")
        if source.name == "__init__.py":
            shutil.copytree(source.parent, target / name, ignore=shutil.ignore_patterns(*EXCLUDED))
        else:
            shutil.copy2(source, target / source.name)
    compileall.compile_dir(str(target), quiet=2, workers=0)


def _layouts(workdir: Path) -> tuple[dict[str, list[Path]], int]:
    """{"with bytecode": [code, layer, runtime], "without bytecode": [...]}, and the number of shipped .pyc."""
    if not (LAYER / "aws_lambda_powertools").is_dir():
        raise LayerNotBuiltError(f"{LAYER} is missing: run `make bundle` first")
    runtime = workdir / "runtime"
    _runtime_stand_in(runtime)
    layouts: dict[str, list[Path]] = {}
    for name, bytecode in (("with bytecode", True), ("without bytecode", False)):
        base = workdir / name.replace(" ", "-")
        stage(code_dirs(), base / "task", bytecode=bytecode)
        layer_ignore = None if bytecode else shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(LAYER, base / "opt" / "python", ignore=layer_ignore)
        layouts[name] = [base / "task", base / "opt" / "python", runtime]
    shipped = sum(1 for path in layouts["with bytecode"][0].rglob("*.pyc")) + sum(
        1 for path in layouts["with bytecode"][1].rglob("*.pyc")
    )
    return layouts, shipped


def _import_ms(path: list[Path]) -> float:
    result = subprocess.run(
        [sys.executable, "-B", "-S", "-c", PROBE, *map(str, path)],
        capture_output=True,
        text=True,
        check=True,
        # No PYTHONPATH or other settings of the caller: the layout alone decides what is imported.
        env={"PATH": "/usr/bin:/bin"},
    )
    return float(result.stdout.strip().splitlines()[-1])


def measure(runs: int) -> dict[str, object]:
    check_interpreter()
    with tempfile.TemporaryDirectory(prefix="cold-start-") as workdir:
        layouts, shipped = _layouts(Path(workdir))
        for layout in layouts.values():  # one untimed import each: the files in the page cache, as on a warm host
            _import_ms(layout)
        timings: dict[str, list[float]] = {name: [] for name in layouts}
        for _ in range(runs):
            for name, layout in layouts.items():
                timings[name].append(_import_ms(layout))
    best = {name: min(values) for name, values in timings.items()}
    return {
        "module": HANDLER_MODULE,
        "python": ".".join(map(str, sys.version_info[:3])),
        "runs": runs,
        "pyc_shipped": shipped,
        "best_ms": best,
        "median_ms": {name: statistics.median(values) for name, values in timings.items()},
        "saved_ms": best["without bytecode"] - best["with bytecode"],
        "saved_share": 1 - best["with bytecode"] / best["without bytecode"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_start", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="fresh interpreters per layout (12)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        result = measure(args.runs)
    except LayerNotBuiltError as error:
        print(f"bench.cold_start: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    best, median = result["best_ms"], result["median_ms"]
    assert isinstance(best, dict) and isinstance(median, dict)
    print(
        f"(a') cold import of {HANDLER_MODULE} from the deployed assets, Python {result['python']}, "
        f"{args.runs} fresh interpreters each, no writable bytecode cache:"
    )
    for name in best:
        print(f"  {name:<17} best {best[name]:7.1f} ms   median {median[name]:7.1f} ms")
    print(
        f"  the {result['pyc_shipped']} shipped .pyc save {result['saved_ms']:.1f} ms "
        f"({result['saved_share']:.0%}) of every cold start's import"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
