"""jobctl loads a subcommand only to run it: help, version and completion stay free of boto3, moto and
Powertools. Completion follows click's protocol (_JOBCTL_COMPLETE), as the shells' scripts drive it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from functions.catalog import CATALOG
from sqs_jobs.cli.cli import COMMANDS
from sqs_jobs.cli.cli import main as jobctl

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("boto3", "botocore", "moto", "aws_lambda_powertools")

# Runs jobctl's main as the installed script does (standalone), then names the heavy modules it imported.
PROBE = f"""
import sys
from sqs_jobs.cli.cli import main
code = None
try:
    main(sys.argv[1:], prog_name="jobctl")
except SystemExit as done:
    code = done.code
heavy = sorted({{name.split(".")[0] for name in sys.modules}} & set({HEAVY!r}))
print("HEAVY:" + ",".join(heavy), f"EXIT:{{code}}", file=sys.stderr)
"""


def _probe(*args: str, env: dict[str, str] | None = None) -> tuple[str, str, str]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    heavy, _, code = result.stderr.strip().splitlines()[-1].partition(" ")
    return result.stdout, heavy.removeprefix("HEAVY:"), code


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["-h"]])
def test_help_and_version_import_no_aws_sdk_moto_or_powertools(args: list[str]) -> None:
    output, heavy, code = _probe(*args)
    assert code == "EXIT:0"
    assert heavy == ""
    if args != ["--version"]:
        for name in COMMANDS:
            assert f"  {name}  " in output


def test_completing_command_names_imports_none_of_them() -> None:
    env = {"_JOBCTL_COMPLETE": "bash_complete", "COMP_WORDS": "jobctl ", "COMP_CWORD": "1"}
    output, heavy, code = _probe(env=env)
    assert code == "EXIT:0" and heavy == ""
    assert output.split() == [f"plain,{name}" for name in sorted(COMMANDS)]


def _complete(words: str, cword: int, shell: str = "bash") -> list[str]:
    env = {"_JOBCTL_COMPLETE": f"{shell}_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    result = CliRunner().invoke(jobctl, [], env=env, prog_name="jobctl")
    assert result.exit_code == 0, result.output
    return result.output.split()


def test_completion_offers_subcommands_of_a_group_and_options() -> None:
    assert _complete("jobctl dlq ", 2) == ["plain,discard", "plain,list", "plain,redrive", "plain,show"]
    assert "plain,--output" in _complete("jobctl dlq list --o", 3)
    assert _complete("jobctl st", 1) == ["plain,stats", "plain,status"]


@pytest.mark.parametrize(
    ("words", "cword"),
    [("jobctl dlq list ", 3), ("jobctl status ", 2), ("jobctl --output json dlq redrive ", 5), ("jobctl enqueue ", 2)],
)
def test_completion_offers_the_catalogs_queue_names(words: str, cword: int) -> None:
    assert _complete(words, cword) == [f"plain,{name}" for name in CATALOG.queue_names]


def test_completion_offers_the_jobs_of_the_queue_given() -> None:
    queue = CATALOG.queue_names[0]
    expected = [f"plain,{name}" for name in CATALOG.queue(queue).job_names]
    assert _complete(f"jobctl enqueue {queue} ", 3) == expected


def test_completion_offers_the_output_formats() -> None:
    assert _complete("jobctl status --output ", 3) == ["plain,table", "plain,json", "plain,text"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_each_shell_gets_its_completion_script(shell: str) -> None:
    result = CliRunner().invoke(jobctl, [], env={"_JOBCTL_COMPLETE": f"{shell}_source"}, prog_name="jobctl")
    assert result.exit_code == 0
    assert "_JOBCTL_COMPLETE" in result.output
