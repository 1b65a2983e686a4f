"""Suite-wide collection order."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `runs_long` first. `make test`'s pytest-xdist hands each worker its share in collection order:
    the chaos soak (about 5 min), collected among the e2e tests, started minutes in and ran on alone at the end
    while a core stood idle."""
    items.sort(key=lambda item: item.get_closest_marker("runs_long") is None)  # a stable sort: the rest keep order
