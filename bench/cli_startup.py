"""Benchmark: how long `jobctl --help` takes to start, against `import boto3` and a bare interpreter.

Each run is a fresh interpreter, timed from outside (wall time of the whole process, as a user waits for it):
`python -m sqs_jobs.cli --help`, the installed `jobctl --help` script when there is one, `python -c "import boto3"` and
`python -c pass`. The commands alternate, after one untimed run each (files in the page cache, bytecode
written). The goal: help in at most half the time of `import boto3`, which it doesn't perform (subcommands are
loaded only when they run, sqs_jobs.cli.cli_globals; `import sqs_jobs` loads nothing).

    python -m bench.cli_startup [--runs N] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "jobctl"
BASELINE = "import boto3"
# jobctl --help in at most half the time of `import boto3` (its median).
GOAL_RATIO = 0.5
SUBJECT = "python -m sqs_jobs.cli --help"


def commands() -> dict[str, list[str]]:
    timed = {
        "python -c pass": [sys.executable, "-c", "pass"],
        f'python -c "{BASELINE}"': [sys.executable, "-c", BASELINE],
        SUBJECT: [sys.executable, "-m", "sqs_jobs.cli", "--help"],
    }
    if SCRIPT.is_file():
        timed["jobctl --help (installed script)"] = [str(SCRIPT), "--help"]
    return timed


def _wall_ms(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) * 1000


def measure(runs: int) -> dict[str, object]:
    timed = commands()
    for command in timed.values():  # untimed: page cache warm, bytecode compiled
        _wall_ms(command)
    timings: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(runs):
        for name, command in timed.items():
            timings[name].append(_wall_ms(command))
    best = {name: min(values) for name, values in timings.items()}
    median = {name: statistics.median(values) for name, values in timings.items()}
    baseline = f'python -c "{BASELINE}"'
    return {
        "python": ".".join(map(str, sys.version_info[:3])),
        "runs": runs,
        "best_ms": best,
        "median_ms": median,
        "ratio_to_import_boto3": {
            "best": best[SUBJECT] / best[baseline],
            "median": median[SUBJECT] / median[baseline],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="fresh interpreters per command (20)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    result = measure(args.runs)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    best, median, ratio = result["best_ms"], result["median_ms"], result["ratio_to_import_boto3"]
    assert isinstance(best, dict) and isinstance(median, dict) and isinstance(ratio, dict)
    print(f"jobctl startup, Python {result['python']}, {args.runs} fresh processes each, alternating, wall time:")
    for name in best:
        print(f"  {name:<36} best {best[name]:7.1f} ms   median {median[name]:7.1f} ms")
    print(
        f"  {SUBJECT} / import boto3: {ratio['best']:.2f} (best), {ratio['median']:.2f} (median)"
        f"   goal: <= {GOAL_RATIO} ({'met' if ratio['median'] <= GOAL_RATIO else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
