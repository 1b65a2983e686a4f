from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import cold_start


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, list[Path]], int]:
    return cold_start._layouts(tmp_path_factory.mktemp("layouts"))


@pytest.mark.slow
def test_only_the_shipped_layout_carries_bytecode(layouts: tuple[dict[str, list[Path]], int]) -> None:
    by_name, shipped = layouts
    with_pyc, without_pyc = by_name["with bytecode"], by_name["without bytecode"]
    assert shipped == sum(len(list(directory.rglob("*.pyc"))) for directory in with_pyc[:2]) > 300
    assert [list(directory.rglob("*.pyc")) for directory in without_pyc[:2]] == [[], []]
    # The runtime stand-in is shared and compiled, as Lambda's own boto3 is.
    assert with_pyc[2] == without_pyc[2] and list(with_pyc[2].glob("boto3/__pycache__/*.pyc"))


def test_the_probe_imports_the_handler_from_the_layout(layouts: tuple[dict[str, list[Path]], int]) -> None:
    by_name, _ = layouts
    assert cold_start._import_ms(by_name["without bytecode"]) > 0


def test_the_probe_refuses_a_layout_whose_layer_is_elsewhere(layouts: tuple[dict[str, list[Path]], int]) -> None:
    task, _, runtime = layouts[0]["with bytecode"]
    with pytest.raises(subprocess.CalledProcessError) as failure:
        cold_start._import_ms([task, runtime, runtime])
    assert "No module named 'sqs_jobs'" in failure.value.stderr
