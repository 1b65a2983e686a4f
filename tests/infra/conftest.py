"""One synthesized stack shared by every infra test: a synth costs ~10 s, so it runs once per session.

The stack is built exactly as app.py builds it (`sqs_jobs.cdk.stack.build_app`), with cdk.json's context and
feature flags. It needs `make bundle` to have run (build/layer).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from functions.catalog import CATALOG

# Before jsii starts Node: this machine's Node 20 would print a deprecation banner in every run.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

if TYPE_CHECKING:
    from aws_cdk.assertions import Template

    from sqs_jobs.cdk.context import StackContext
    from sqs_jobs.cdk.stack import JobsStack

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Synth:
    """The synthesized stack, as CDK's Template and as plain JSON for lookups."""

    stack: JobsStack
    context: StackContext
    template: Template
    resources: dict[str, dict[str, Any]]
    outputs: dict[str, dict[str, Any]]
    assembly_dir: Path


@pytest.fixture(scope="session")
def cdk_context() -> dict[str, Any]:
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return context


@pytest.fixture(scope="session")
def synth(cdk_context: dict[str, Any]) -> Synth:
    from aws_cdk.assertions import Template

    from sqs_jobs.cdk.context import StackContext
    from sqs_jobs.cdk.stack import build_app

    app, stack = build_app(cdk_context)
    assembly = app.synth()
    as_json = assembly.get_stack_artifact(stack.artifact_id).template
    # from_json also fails on a circular reference between resources (the DLQ <-> source queue trap).
    template = Template.from_json(as_json)
    return Synth(
        stack=stack,
        context=StackContext.parse(cdk_context.get, catalog=CATALOG),
        template=template,
        resources=as_json["Resources"],
        outputs=as_json.get("Outputs", {}),
        assembly_dir=Path(assembly.directory),
    )


@pytest.fixture(scope="session")
def template(synth: Synth) -> Template:
    return synth.template
