"""CDK entry point (`cdk synth`, run by the CLI through cdk.json): one stack built from the catalog.

Settings come from CDK context only (defaults in cdk.json); no AWS calls, no git, no environment reading.
"""

from __future__ import annotations

import sys

from infra.context import ContextError
from infra.dependencies_layer import LayerMissingError
from infra.monitoring import MonitoringError
from infra.resource_providers import MissingResourceError
from infra.stack import build_app


def main() -> None:
    try:
        app, _ = build_app()
    except (ContextError, LayerMissingError, MissingResourceError, MonitoringError) as exc:
        # One line that says what to do, not a jsii traceback.
        sys.exit(f"error: {exc}")
    app.synth()


if __name__ == "__main__":
    main()
