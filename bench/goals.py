"""Issue 33's goals, each with its figure from one run and whether it is met (the last step of `make bench`).

- per record, no feature on: at most 1.10x a bare Powertools batch + idempotency handler (bench.overhead (b)),
  each feature's own cost beside it;
- cold import of a plain queue's worker: at most 1.10x the bare handler's (bench.overhead (a));
- `jobctl --help`: at most 0.5x `python -c "import boto3"` (bench.cli_startup);
- DynamoDB per million new jobs: at most 1.25x Powertools' own two writes (bench.cost, the first catalog queue);
- DynamoDB writes (bench.writes): 2 per new job, 0 per duplicate, none worse than before.

Benchmarks, not tests: a goal not met is printed as such, and the exit code is 0 either way (`--strict`: 1).

    python -m bench.goals [--records N] [--rounds N] [--imports N] [--runs N] [--strict] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Any

from bench import cli_startup, cost, overhead, writes
from functions.catalog import CATALOG


@dataclass(frozen=True)
class Goal:
    name: str
    figure: str
    goal: str
    met: bool


def _overhead_goals(records: int, rounds: int, imports: int) -> tuple[list[Goal], dict[str, Any]]:
    result = overhead.measure(records, rounds, imports, [*overhead.FEATURES, overhead.ALL_FEATURES])
    per_record, own = result["per_record_ratio"], result["per_record_ratio_without_store"]
    costs = ", ".join(f"{name} {value:+.0f} us" for name, value in result["feature_cost_us"].items())
    goals = [
        Goal(
            "per record, no feature on, vs bare Powertools",
            f"{per_record:.2f}x ({result['per_record_us']['this runtime, none']:.0f} vs "
            f"{result['per_record_us']['bare Powertools']:.0f} us; without the store's own time {own:.2f}x); "
            f"each feature: {costs}",
            f"<= {overhead.GOAL_RATIO:.2f}x",
            per_record <= overhead.GOAL_RATIO,
        ),
        Goal(
            "cold import of a plain queue's worker vs the bare handler",
            f"{result['cold_import_ratio']:.2f}x (best of {imports}: "
            f"{result['cold_import_ms'][overhead.PLAIN_IMPORT]:.0f} vs "
            f"{result['cold_import_ms'][overhead.BARE_IMPORT]:.0f} ms; by medians "
            f"{result['cold_import_ratio_median']:.2f}x; the example's every feature "
            f"{result['cold_import_ratio_every_feature']:.2f}x)",
            f"<= {overhead.GOAL_RATIO:.2f}x",
            result["cold_import_ratio"] <= overhead.GOAL_RATIO,
        ),
    ]
    return goals, result


def _cli_goal(runs: int) -> Goal:
    result = cli_startup.measure(runs)
    ratio: float = result["ratio_to_import_boto3"]["median"]  # type: ignore[index]
    return Goal(
        "jobctl --help vs import boto3",
        f"{ratio:.2f}x (median of {runs})",
        f"<= {cli_startup.GOAL_RATIO}x",
        ratio <= cli_startup.GOAL_RATIO,
    )


def _cost_goal() -> Goal:
    prices, assume = cost.Prices(), cost.Assumptions()
    queue = CATALOG.queues[0]
    ours = cost.queue_cost(queue, prices, assume).dynamodb
    # Powertools' own idempotency: an IN_PROGRESS put and a COMPLETED update per new job.
    powertools = 2 * prices.dynamodb_per_million_wru
    return Goal(
        "DynamoDB per million new jobs vs Powertools' own two writes",
        f"{ours / powertools:.2f}x ({ours:.3f} vs {powertools:.3f} USD, queue {queue.name!r}, bench.cost's defaults)",
        "<= 1.25x",
        ours <= 1.25 * powertools,
    )


def _write_goals(jobs: int) -> list[Goal]:
    results = {result.phase: result for result in writes.run(jobs)}
    goals = []
    for phase in ("new", "duplicate"):
        per_job = results[phase].effective_writes / results[phase].jobs
        goal = writes.goal_of(phase, jobs)
        goals.append(
            Goal(f"DynamoDB writes per {phase} job (bench.writes)", f"{per_job:g}", f"{goal:g}", per_job <= goal)
        )
    return goals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.goals", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200, help="records per event in bench.overhead (200)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per handler (5)")
    parser.add_argument("--imports", type=int, default=17, help="fresh interpreters per cold import (17)")
    parser.add_argument("--runs", type=int, default=15, help="runs of each command in bench.cli_startup (15)")
    parser.add_argument("--jobs", type=int, default=50, help="jobs per phase in bench.writes (50)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a goal is not met")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    goals, _ = _overhead_goals(args.records, args.rounds, args.imports)
    goals += [_cli_goal(args.runs), _cost_goal(), *_write_goals(args.jobs)]
    if args.json:
        print(json.dumps([asdict(goal) for goal in goals], indent=2))
    else:
        print("Issue 33's goals, this run:")
        for goal in goals:
            print(f"  {'met    ' if goal.met else 'NOT met'}  {goal.name} (goal {goal.goal}): {goal.figure}")
    return 1 if args.strict and not all(goal.met for goal in goals) else 0


if __name__ == "__main__":
    sys.exit(main())
