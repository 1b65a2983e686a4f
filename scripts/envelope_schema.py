"""`make schema`: write the catalog's job names into the job enum of docs/envelope.schema.json.

The rest of the schema is the envelope contract, written by hand and checked against the parser by
tests/unit/test_envelope.py; the enum is the app's, so it is generated (the test fails while it differs).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from sqs_jobs.catalog import CATALOG

SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "envelope.schema.json"
# The job property's enum line, as the file writes it: `"enum": [...]` right after the job's "type".
_JOB_ENUM = re.compile(r'("job": \{\n(?:\s+"[^\n]*\n)*?\s+)"enum": \[[^\]\n]*\]')


def with_job_enum(text: str, job_names: tuple[str, ...]) -> str:
    replaced, count = _JOB_ENUM.subn(lambda match: match.group(1) + '"enum": ' + json.dumps(list(job_names)), text)
    if count != 1:
        raise ValueError("docs/envelope.schema.json has no job enum line where expected")
    return replaced


def main() -> int:
    text = SCHEMA.read_text()
    updated = with_job_enum(text, CATALOG.job_names)
    if updated != text:
        SCHEMA.write_text(updated)
        print(f"{SCHEMA.name}: job enum set to {', '.join(CATALOG.job_names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
