"""The deploy rehearsal's one deployment: LocalStack started and the app deployed with the CDK CLI, once per run.

`make rehearse` runs this folder in its own pytest run (`make test` runs it after the other tests); the default
run leaves it out (`--ignore` in pyproject.toml), because it needs what `make rehearse` installs: the LocalStack
environment, the CDK CLI and the bundled layer. Nothing here skips: if LocalStack can't start or the stack can't
deploy, the run fails with the reason (each failed resource and its reason, LocalStack's log).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.rehearsal.cdk_deploy import Deployment, deploy, synthesize
from tests.rehearsal.emulator import ROOT, running_localstack

WORKDIR = ROOT / "build" / "rehearsal"


@pytest.fixture(scope="session")
def deployment() -> Iterator[Deployment]:
    WORKDIR.mkdir(parents=True, exist_ok=True)
    (WORKDIR / "cdk.log").unlink(missing_ok=True)
    with running_localstack(WORKDIR / "localstack") as emulator:
        # REHEARSAL_CDK_ARGS: context for the synth, e.g. "-c key=value" (the Makefile passes it through).
        assembly = synthesize(WORKDIR, os.environ.get("REHEARSAL_CDK_ARGS", ""))
        yield deploy(emulator, assembly, WORKDIR)
