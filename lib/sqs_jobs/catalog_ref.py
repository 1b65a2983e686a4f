"""Which catalog a project runs: named once as `package.module:NAME`, loaded where it is needed.

The framework never imports an app's catalog by itself: the CDK app is given one reference (context `catalog`),
synthesizes with the catalog it names and passes the same reference to every function it deploys
(`JOBS_CATALOG`), whose worker loads it on its first invocation. A stack deployed before the reference existed
has no `JOBS_CATALOG`: its functions load `DEFAULT_CATALOG_REF`, the catalog they were built with.

Standard library only: services install this distribution.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqs_jobs.specs import Catalog

# The environment variable a deployed function reads its catalog's reference from.
ENV_CATALOG = "JOBS_CATALOG"
# The catalog of this repository's deployment: what a stack without a reference runs.
DEFAULT_CATALOG_REF = "sqs_jobs.catalog:CATALOG"

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_REF = re.compile(rf"({_DOTTED}):([A-Za-z_][A-Za-z0-9_]*)")
_ACCEPTED = "accepted: 'package.module:NAME', NAME a Catalog defined in that module (e.g. 'functions.catalog:CATALOG')"


class CatalogRefError(ValueError):
    """A catalog reference that is malformed, can't be imported, or names something that is not a Catalog; its
    message is one line saying which, and what is accepted."""


def load_catalog(ref: str) -> Catalog:
    """The Catalog `ref` names, imported; CatalogRefError when it can't be. Its module is imported (and cached by
    Python) like any other: a catalog's own rules run as it is built."""
    from sqs_jobs.specs import Catalog

    found = _REF.fullmatch(ref.strip())
    if found is None:
        raise CatalogRefError(f"catalog reference {ref!r} is malformed; {_ACCEPTED}")
    module_name, attribute = found.groups()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise CatalogRefError(
            f"catalog reference {ref!r}: module {module_name!r} can't be imported ({error}); {_ACCEPTED}"
        ) from error
    catalog = getattr(module, attribute, None)
    if not isinstance(catalog, Catalog):
        what = "nothing of that name" if catalog is None else f"a {type(catalog).__name__}"
        raise CatalogRefError(f"catalog reference {ref!r}: {module_name}.{attribute} is {what}; {_ACCEPTED}")
    return catalog


def project_catalog_ref(start: Path) -> str | None:
    """`[tool.sqs-jobs] catalog` of the nearest pyproject.toml at or above `start` that has a `[tool.sqs-jobs]`
    table; None if none does. A project names its catalog once, there."""
    import tomllib

    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        if not candidate.is_file():
            continue
        try:
            settings = tomllib.loads(candidate.read_text(encoding="utf-8")).get("tool", {}).get("sqs-jobs")
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if isinstance(settings, dict) and isinstance(settings.get("catalog"), str):
            return str(settings["catalog"])
    return None
