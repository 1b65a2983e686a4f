"""The example's stack: the framework's JobsStack over this project's catalog (functions/catalog.py).

The catalog is named once, in pyproject.toml (`[tool.sqs-jobs] catalog`); `-c catalog=...` names another for one
synth. Settings come from CDK context only (defaults in cdk.json): no AWS calls, no environment reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import App

from sqs_jobs.cdk.stack import JobsStack, build_app


def build(context: Mapping[str, Any] | None = None) -> tuple[App, JobsStack]:
    return build_app(context)
