"""The wheel's version, read by hatch when `make wheel` builds it: the library's release, then which job contract
version and which catalog's contract it carries (a hash), so a wheel built from a changed catalog is a new
version and `pip install` takes it without --force-reinstall."""

from __future__ import annotations

import hashlib

from sqs_jobs.catalog import CATALOG
from sqs_jobs.contract import CONTRACT_VERSION, JobContract

RELEASE = "0.2.0"


def wheel_version() -> str:
    digest = hashlib.sha256(JobContract.from_catalog(CATALOG).to_json().encode()).hexdigest()[:12]
    return f"{RELEASE}+contract{CONTRACT_VERSION}.catalog{digest}"


__version__ = wheel_version()
