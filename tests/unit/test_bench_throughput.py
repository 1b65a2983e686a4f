"""bench.throughput's pure parts: the text table and the rendering (its timings are make bench's, never a test's)."""

from __future__ import annotations

import pytest

from bench.throughput import RunResult, render, table


def test_a_table_pads_each_column_to_its_widest_cell() -> None:
    assert table(("a", "bb"), [("ccc", "d"), ("e", "ffff")]) == [
        "a   | bb",
        "----+-----",
        "ccc | d",
        "e   | ffff",
    ]


def test_render_shows_the_engine_beside_raw_moto_and_its_problems() -> None:
    engine = RunResult("engine", "generate_invoice", 1000, 50, pollers=2, elapsed_s=40.0, completed=1000)
    engine.requests = {"dynamodb": 3000, "s3": 1000}
    engine.problems.append("1 job(s) without a invoice (lost)")
    raw = RunResult("raw moto", "generate_invoice", 1000, 50, pollers=2, elapsed_s=8.0, completed=1000)
    assert engine.per_s == pytest.approx(25.0)
    assert raw.per_s == pytest.approx(125.0)
    lines = render([(engine, raw)]).splitlines()
    assert lines[0].startswith("job ") and set(lines[1]) <= {"-", "+"}
    assert "| 25.0 " in lines[2] and "| 125.0 " in lines[2] and "| 0.20x " in lines[2] and lines[2].endswith("| NO")
    assert "generate_invoice backlog 50, engine: 40.0 s; moto requests/job: dynamodb 3.00, s3 1.00" in lines
    assert "    PROBLEM: 1 job(s) without a invoice (lost)" in lines
