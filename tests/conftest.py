"""The whole suite's one hook: the longest tests start first, one per pytest-xdist worker.

`make test` runs the suite on three workers with `--dist worksteal`, which hands each worker a contiguous share of
the collection and lets an idle worker take half of a busy one's queue from its end. A test of minutes that
happens to sit late in a share would start last and hold the whole run; placed at the head of the shares, the
longest run from the start, one per worker, while the rest is shared around them. `--durations` in `make test`
shows which tests those are.
"""

from __future__ import annotations

import pytest

# Longest first (seconds on this 2-core machine, make test's --durations): the 2,000-job chaos soak (~260), the
# models of a job's life (~90) and of a durable job's (~70), a new project from jobctl init in a fresh venv (~30).
LONGEST = (
    "tests/e2e/test_chaos.py::test_chaos_soak_keeps_every_promise",
    "tests/functional/test_model.py::test_every_promise_holds_where_the_features_meet",
    "tests/functional/test_model_durable.py::test_every_durable_ending_keeps_its_promises",
    "tests/packaging/test_new_project.py::",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers or config.getoption("dist", None) != "worksteal":
        return
    rank = {prefix: index for index, prefix in enumerate(LONGEST)}

    def longest(item: pytest.Item) -> int | None:
        return next((rank[prefix] for prefix in LONGEST if item.nodeid.startswith(prefix)), None)

    first = sorted((item for item in items if longest(item) is not None), key=lambda item: longest(item) or 0)
    rest = [item for item in items if longest(item) is None]
    # The shares worksteal cuts from the collection, in order: each the remainder divided by the workers left.
    sizes, left = [], len(items)
    for index in range(workers):
        sizes.append(left // (workers - index))
        left -= sizes[-1]
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for index, item in enumerate(first):
        shares[index % workers].append(item)
    pending = iter(rest)
    for share, size in zip(shares, sizes, strict=True):
        share.extend(next(pending) for _ in range(max(0, size - len(share))))
    items[:] = [item for share in shares for item in share] + list(pending)
