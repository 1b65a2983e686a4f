"""CDK entry point (`cdk synth`, run by the CLI through cdk.json): the example's one stack (infra/stack.py).

Settings come from CDK context only (defaults in cdk.json); no AWS calls, no git, no environment reading.
"""

from __future__ import annotations

import sys

from infra.stack import build
from sqs_jobs.cdk.errors import SYNTH_ERRORS


def main() -> None:
    try:
        app, _ = build()
    except SYNTH_ERRORS as exc:
        # One line that says what to do, not a jsii traceback.
        sys.exit(f"error: {exc}")
    app.synth()


if __name__ == "__main__":
    main()
