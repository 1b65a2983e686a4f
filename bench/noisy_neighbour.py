"""Benchmark (h): a noisy neighbour on one queue, with and without SQS fair queues: a simulation.

    python -m bench.noisy_neighbour [--noisy 5000] [--quiet 50] [--json]

Tenant A publishes `noisy` jobs at once, then (a second later) tenant B publishes `quiet` jobs. The publisher sends
each job's tenant as its MessageGroupId on a standard queue (JobPublisher, `tenant=`), which is all SQS fair
queues need. The local engine can't show what SQS then does: moto and LocalStack deliver a standard queue's
messages without regard to their group. So, like bench.outage, this is a model on a virtual clock, of the
delivery rules AWS documents for fair queues ("How Amazon SQS fair queues work",
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-fair-queues-detailed.html):

- a tenant is noisy while its in-flight messages are more than 10 % of the queue's and at least 30, or its share of
  the consumers' recent processing time is more than 10 %;
- while a tenant is noisy, a consumer that asks gets a quiet tenant's message whenever one is waiting; noisy
  tenants' messages are not dropped or throttled, only delivered after; among noisy tenants, the one with the
  fewest messages in flight first;
- a tenant stops being noisy once its backlog has drained (or after 5 minutes without sending).

Consumers are the invoices-sized fleet of the example by default: `max_concurrency` x `parallel_records` = 50 runs
at once, each job taking a run time drawn around `run_s`. Without fair queues the model delivers the oldest waiting
message first (a standard queue's order is best effort; oldest first is what a backlog looks like to a newcomer).

Measured, for tenant B: the p95 of its jobs' time from publish to done, (1) on an empty queue, (2) behind A's
backlog on a fair queue, (3) behind it without fairness. The issue's goal: (2) within 2x of (1).
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_NOISY = 5000
DEFAULT_QUIET = 50
CONSUMERS = 50
RUN_S = 0.2
QUIET_STARTS_S = 1.0
# AWS's documented thresholds.
CONCURRENCY_SHARE = 0.10
MIN_IN_FLIGHT = 30
PROCESSING_SHARE = 0.10
# The recent processing time a tenant's share is judged over.
RECENT_S = 10.0
GOAL_RATIO = 2.0


@dataclass
class _Message:
    tenant: str
    sent_at: float


@dataclass
class FairQueueModel:
    """A standard queue's waiting messages per tenant, delivered oldest first, or fairly (`fair`)."""

    fair: bool
    waiting: dict[str, deque[_Message]] = field(default_factory=dict)
    in_flight: Counter[str] = field(default_factory=Counter)
    # (ended at, tenant, run time) of recent runs: each tenant's share of the consumers' processing time.
    recent: deque[tuple[float, str, float]] = field(default_factory=deque)

    def send(self, message: _Message) -> None:
        self.waiting.setdefault(message.tenant, deque()).append(message)

    def noisy(self, now: float) -> set[str]:
        while self.recent and self.recent[0][0] < now - RECENT_S:
            self.recent.popleft()
        total_in_flight = sum(self.in_flight.values())
        total_time = sum(run for _, _, run in self.recent)
        time_by_tenant: dict[str, float] = {}
        for _, tenant, run in self.recent:
            time_by_tenant[tenant] = time_by_tenant.get(tenant, 0.0) + run
        found = set()
        for tenant, queued in self.waiting.items():
            if not queued:
                continue  # its backlog has drained
            flying = self.in_flight[tenant]
            by_concurrency = flying >= MIN_IN_FLIGHT and flying > CONCURRENCY_SHARE * total_in_flight
            by_time = total_time > 0 and time_by_tenant.get(tenant, 0.0) > PROCESSING_SHARE * total_time
            if by_concurrency or by_time:
                found.add(tenant)
        return found

    def receive(self, now: float) -> _Message | None:
        candidates = [tenant for tenant, queued in self.waiting.items() if queued]
        if not candidates:
            return None
        if self.fair:
            noisy = self.noisy(now)
            quiet = [tenant for tenant in candidates if tenant not in noisy]
            if quiet:
                candidates = quiet
            else:
                fewest = min(self.in_flight[tenant] for tenant in candidates)
                candidates = [tenant for tenant in candidates if self.in_flight[tenant] == fewest]
        tenant = min(candidates, key=lambda name: self.waiting[name][0].sent_at)
        message = self.waiting[tenant].popleft()
        self.in_flight[tenant] += 1
        return message

    def done(self, message: _Message, now: float, run_s: float) -> None:
        self.in_flight[message.tenant] -= 1
        self.recent.append((now, message.tenant, run_s))


def simulate(noisy: int, quiet: int, fair: bool, seed: int = 1) -> list[float]:
    """Tenant B's publish-to-done times (seconds), tenant A having published `noisy` jobs first (0: none)."""
    rng = random.Random(seed)
    model = FairQueueModel(fair=fair)
    for _ in range(noisy):
        model.send(_Message("A", 0.0))
    events: list[tuple[float, int, str, Any]] = []
    order = 0

    def push(at: float, kind: str, payload: Any = None) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (at, order, kind, payload))

    push(QUIET_STARTS_S, "quiet")
    for _ in range(CONSUMERS):
        push(0.0, "free")
    idle = 0
    waits: list[float] = []
    while events:
        now, _, kind, payload = heapq.heappop(events)
        if kind == "quiet":
            for _ in range(quiet):
                model.send(_Message("B", now))
            for _ in range(idle):
                push(now, "free")
            idle = 0
            continue
        if kind == "done":
            message, run_s = payload
            model.done(message, now, run_s)
            if message.tenant == "B":
                waits.append(now - message.sent_at)
        message = model.receive(now)
        if message is None:
            idle += 1
            continue
        run_s = rng.uniform(0.5 * RUN_S, 1.5 * RUN_S)
        push(now + run_s, "done", (message, run_s))
    return waits


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else 0.0


def measure(noisy: int, quiet: int) -> dict[str, Any]:
    alone = p95(simulate(0, quiet, fair=True))
    fair = p95(simulate(noisy, quiet, fair=True))
    unfair = p95(simulate(noisy, quiet, fair=False))
    return {
        "noisy_jobs": noisy,
        "quiet_jobs": quiet,
        "consumers": CONSUMERS,
        "run_s": RUN_S,
        "quiet_p95_s_empty_queue": round(alone, 3),
        "quiet_p95_s_fair_queue": round(fair, 3),
        "quiet_p95_s_without_fairness": round(unfair, 3),
        "fair_ratio": round(fair / alone, 2) if alone else None,
        "goal_ratio": GOAL_RATIO,
        "met": bool(alone) and fair <= GOAL_RATIO * alone,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.noisy_neighbour", description="(h) A noisy neighbour, with and without fair queues."
    )
    parser.add_argument("--noisy", type=int, default=DEFAULT_NOISY, help=f"tenant A's jobs (default {DEFAULT_NOISY})")
    parser.add_argument("--quiet", type=int, default=DEFAULT_QUIET, help=f"tenant B's jobs (default {DEFAULT_QUIET})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)
    if args.noisy < 0 or args.quiet < 1:
        parser.error("--noisy must be at least 0 and --quiet at least 1")
    figures = measure(args.noisy, args.quiet)
    if args.json:
        json.dump(figures, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(
            f"(h) tenant A: {args.noisy} jobs, then tenant B: {args.quiet}; {CONSUMERS} runs at once, ~{RUN_S:g} s "
            "each (a model of SQS's documented fair-queue delivery)"
        )
        print(f"    B's p95 publish-to-done, empty queue        {figures['quiet_p95_s_empty_queue']:>8.3f} s")
        print(
            f"    B's p95 behind A, fair queue               {figures['quiet_p95_s_fair_queue']:>8.3f} s   "
            f"({figures['fair_ratio']}x; goal <= {GOAL_RATIO:g}x)"
        )
        print(f"    B's p95 behind A, without fairness         {figures['quiet_p95_s_without_fairness']:>8.3f} s")
    return 0 if figures["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
