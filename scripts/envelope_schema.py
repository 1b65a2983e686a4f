"""`make schema`: write the catalog's job names into the job enum of docs/envelope.schema.json, and the class of
hidden characters (sqs_jobs.visible) into its noHiddenCharacters pattern.

The rest of the schema is the envelope contract, written by hand and checked against the parser by
tests/unit/test_envelope.py; the enum is the app's and the class is Unicode's, so both are generated (the test
fails while either differs).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from functions.catalog import CATALOG
from sqs_jobs.visible import hidden_ranges

SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "envelope.schema.json"
# The job property's enum line, as the file writes it: `"enum": [...]` right after the job's "type".
_JOB_ENUM = re.compile(r'("job": \{\n(?:\s+"[^\n]*\n)*?\s+)"enum": \[[^\]\n]*\]')


def with_job_enum(text: str, job_names: tuple[str, ...]) -> str:
    replaced, count = _JOB_ENUM.subn(lambda match: match.group(1) + '"enum": ' + json.dumps(list(job_names)), text)
    if count != 1:
        raise ValueError("docs/envelope.schema.json has no job enum line where expected")
    return replaced


# The noHiddenCharacters pattern line, as the file writes it.
_HIDDEN = re.compile(
    r'("noHiddenCharacters": \{\n(?:\s+"[^\n]*\n)*?\s+"not": \{"type": "string", "pattern": )"[^"\n]*"'
)
# Surrogates are refused by the parser, as rule (4) says, not by a pattern: engines disagree on what they see.
_SURROGATES = range(0xD800, 0xE000)


def hidden_class() -> str:
    """The hidden characters of the Basic Multilingual Plane as one character class of \\uXXXX escapes, which
    ECMA-262 and Python's re read alike (above the BMP the parser alone refuses them: docs/envelope.md)."""
    parts = []
    for first, last in hidden_ranges(0x10000):
        for low, high in _without_surrogates(first, last):
            parts.append(f"\\u{low:04x}" if low == high else f"\\u{low:04x}-\\u{high:04x}")
    return "[" + "".join(parts) + "]"


def _without_surrogates(first: int, last: int) -> list[tuple[int, int]]:
    if last < _SURROGATES.start or first >= _SURROGATES.stop:
        return [(first, last)]
    pieces = []
    if first < _SURROGATES.start:
        pieces.append((first, _SURROGATES.start - 1))
    if last >= _SURROGATES.stop:
        pieces.append((_SURROGATES.stop, last))
    return pieces


def with_hidden_class(text: str) -> str:
    replaced, count = _HIDDEN.subn(lambda match: match.group(1) + json.dumps(hidden_class()), text)
    if count != 1:
        raise ValueError("docs/envelope.schema.json has no noHiddenCharacters pattern line where expected")
    return replaced


def main() -> int:
    text = SCHEMA.read_text()
    updated = with_hidden_class(with_job_enum(text, CATALOG.job_names))
    if updated != text:
        SCHEMA.write_text(updated)
        print(f"{SCHEMA.name}: job enum set to {', '.join(CATALOG.job_names)}; hidden characters per Unicode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
