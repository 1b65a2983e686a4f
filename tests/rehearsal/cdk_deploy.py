"""Deploying the app to the emulator the way an operator deploys it to AWS: the pinned CDK CLI, `cdk synth`,
`cdk bootstrap`, `cdk deploy`, with every AWS call sent to the emulator's endpoint.

The real CLI rather than a CreateStack of our own: it publishes the file assets with the bootstrap's publishing
role, checks the bootstrap version and deploys through a change set, so the rehearsal covers what `make deploy`
does, not an imitation of it.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rehearsal.emulator import ROOT, Emulator, dies_with_parent

CDK = ROOT / "node_modules" / ".bin" / "cdk"
CDK_TIMEOUT_S = 300
# The CLI's version check and notices need the internet; jsii warns about Node 20 (as in the Makefile).
_OFFLINE = {
    "CDK_DISABLE_VERSION_CHECK": "1",
    "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
}
_FAILED = ("CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED", "IMPORT_FAILED")


class DeployError(Exception):
    """The app could not be synthesized or deployed to the emulator."""


@dataclass(frozen=True)
class FailedResource:
    logical_id: str
    resource_type: str
    status: str
    reason: str

    def __str__(self) -> str:
        return f"{self.logical_id} ({self.resource_type}) {self.status}: {self.reason or '(no reason given)'}"


class DeployFailedError(DeployError):
    """A `cdk` step failed; `failures` are the resources that failed in the emulator, each with its reason."""

    def __init__(self, step: str, logs: list[Path], failures: list[FailedResource]) -> None:
        self.failures = failures
        listed = "".join(f"\n  {failure}" for failure in failures) or " none recorded"
        shown = ", ".join(str(log) for log in logs)
        super().__init__(f"`cdk {step}` failed (logs: {shown}); failed resources:{listed}")


@dataclass(frozen=True)
class Deployment:
    emulator: Emulator
    account: str
    stack_name: str
    outputs: dict[str, str]
    # The CloudFormation template deployed, as synthesized.
    template: dict[str, Any]


def synthesize(workdir: Path, cdk_args: str = "") -> Path:
    """`cdk synth` (as `make synth`, plus `cdk_args` such as `-c key=value`) into `workdir/cdk.out`, leaving the
    repository's cdk.out alone. Offline, without credentials. Returns the cloud assembly."""
    assembly = workdir / "cdk.out"
    _cdk(None, workdir / "cdk.log", "synth", "--quiet", f"--output={assembly}", *shlex.split(cdk_args))
    return assembly


def deploy(emulator: Emulator, assembly: Path, workdir: Path) -> Deployment:
    """`cdk bootstrap` of the emulator's account and region, then `cdk deploy` of the assembly's one stack."""
    account = emulator.client("sts").get_caller_identity()["Account"]
    outputs_file = workdir / "outputs.json"
    log_path = workdir / "cdk.log"
    _cdk(emulator, log_path, "bootstrap", f"--app={assembly}", f"aws://{account}/{emulator.region}")
    _cdk(
        emulator,
        log_path,
        "deploy",
        f"--app={assembly}",
        "--all",
        "--require-approval=never",
        "--progress=events",
        f"--outputs-file={outputs_file}",
    )
    [(stack_name, outputs)] = json.loads(outputs_file.read_text()).items()
    manifest = json.loads((assembly / "manifest.json").read_text())
    template = json.loads((assembly / manifest["artifacts"][stack_name]["properties"]["templateFile"]).read_text())
    return Deployment(emulator=emulator, account=account, stack_name=stack_name, outputs=outputs, template=template)


def _cdk(emulator: Emulator | None, log_path: Path, step: str, *args: str) -> None:
    if not CDK.exists():
        raise DeployError(f"{CDK} is missing: run `make dev`")
    # Without an emulator (synth): no AWS settings at all, so nothing can reach an account.
    env = emulator.aws_environment() if emulator else {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    with log_path.open("a") as log:
        log.write(f"$ cdk {step} {shlex.join(args)}\n")
        log.flush()
        started = time.monotonic()
        finished = subprocess.run(
            dies_with_parent([str(CDK), step, *args]),
            cwd=ROOT,
            env=env | _OFFLINE,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=CDK_TIMEOUT_S,
            check=False,
        )
        log.write(f"# cdk {step}: exit {finished.returncode} after {time.monotonic() - started:.1f}s\n")
    if finished.returncode != 0:
        if emulator is None:
            raise DeployFailedError(step, [log_path], [])
        raise DeployFailedError(step, [log_path, emulator.log_path], failed_resources(emulator))


def failed_resources(emulator: Emulator) -> list[FailedResource]:
    """Every resource that failed in any stack of the emulator, from CloudFormation's events (a failed create
    rolls back and deletes the resources, but their events remain)."""
    cloudformation = emulator.client("cloudformation")
    failures: list[FailedResource] = []
    for page in cloudformation.get_paginator("list_stacks").paginate():
        for stack in page["StackSummaries"]:
            for events in cloudformation.get_paginator("describe_stack_events").paginate(StackName=stack["StackId"]):
                failures.extend(
                    FailedResource(
                        logical_id=event["LogicalResourceId"],
                        resource_type=event["ResourceType"],
                        status=event["ResourceStatus"],
                        reason=event.get("ResourceStatusReason", ""),
                    )
                    for event in events["StackEvents"]
                    if event["ResourceStatus"] in _FAILED and event["ResourceType"] != "AWS::CloudFormation::Stack"
                )
    return failures
