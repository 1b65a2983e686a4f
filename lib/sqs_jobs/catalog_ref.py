"""Which catalog a project runs: named once as `package.module:NAME`, loaded where it is needed.

The framework never imports an app's catalog by itself: the CDK app is given one reference (context `catalog`),
synthesizes with the catalog it names and passes the same reference to every function it deploys
(`JOBS_CATALOG`), whose worker loads it on its first invocation. jobctl and the local engine find it the same way:
`--catalog`, `$JOBS_CATALOG`, else the project's pyproject.toml.

Standard library only: services install this distribution.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from sqs_jobs.specs import Catalog

# The environment variable a deployed function reads its catalog's reference from.
ENV_CATALOG = "JOBS_CATALOG"
# Where a project names its catalog: `[tool.sqs-jobs] catalog = "package.module:NAME"` in its pyproject.toml.
PROJECT_SETTING = "[tool.sqs-jobs] catalog"

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_REF = re.compile(rf"({_DOTTED}):([A-Za-z_][A-Za-z0-9_]*)")
_ACCEPTED = "accepted: 'package.module:NAME', NAME a Catalog defined in that module (e.g. 'functions.catalog:CATALOG')"


class CatalogRefError(ValueError):
    """A catalog reference that is malformed, can't be imported, or names something that is not a Catalog; its
    message is one line saying which, and what is accepted."""


class NoCatalogError(CatalogRefError):
    """Nothing names the project's catalog: no --catalog, no $JOBS_CATALOG, no pyproject.toml setting."""


class Project(NamedTuple):
    """A deployment project: the directory of its pyproject.toml, and the catalog it names there. A NamedTuple:
    the worker imports this module to load its catalog, and a dataclass cost its cold start 0.4 ms."""

    root: Path
    catalog_ref: str

    def top_package(self) -> str:
        """The import package the catalog is in (`functions` for `functions.catalog:CATALOG`)."""
        return self.catalog_ref.split(":", 1)[0].split(".", 1)[0]


def load_catalog(ref: str, search_path: Path | None = None) -> Catalog:
    """The Catalog `ref` names, imported; CatalogRefError when it can't be. Its module is imported (and cached by
    Python) like any other: a catalog's own rules run as it is built. `search_path`: the project's root, put on
    `sys.path` when it is not there (a console script's path starts at its own directory, not the project's)."""
    from sqs_jobs.specs import Catalog

    if search_path is not None and str(search_path) not in sys.path:
        sys.path.insert(0, str(search_path))

    found = _REF.fullmatch(ref.strip())
    if found is None:
        raise CatalogRefError(f"catalog reference {ref!r} is malformed; {_ACCEPTED}")
    module_name, attribute = found.groups()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if not error.name or not f"{module_name}.".startswith(f"{error.name}."):
            # An import of the catalog's own that fails: a package it needs, not the reference.
            raise CatalogRefError(
                f"catalog reference {ref!r}: importing {module_name!r} failed: {_one_line(error)}"
            ) from error
        raise CatalogRefError(
            f"catalog reference {ref!r}: module {module_name!r} can't be imported ({error}); {_ACCEPTED}"
        ) from error
    except Exception as error:  # the catalog's own code: its checks (CatalogError), a typo, a failed import
        raise CatalogRefError(
            f"catalog reference {ref!r}: importing {module_name!r} failed: {_one_line(error)}"
        ) from error
    catalog = getattr(module, attribute, None)
    if not isinstance(catalog, Catalog):
        what = "nothing of that name" if catalog is None else f"a {type(catalog).__name__}"
        raise CatalogRefError(f"catalog reference {ref!r}: {module_name}.{attribute} is {what}; {_ACCEPTED}")
    return catalog


def _one_line(error: BaseException) -> str:
    """The error's type and message on one line, where it came from when Python says (a syntax error's line)."""
    where = ""
    if isinstance(error, SyntaxError) and error.filename:
        where = f" ({error.filename}:{error.lineno})"
    return f"{type(error).__name__}: {' '.join(str(error).split())}{where}"


def find_project(start: Path) -> Project | None:
    """The nearest project at or above `start` whose pyproject.toml names a catalog (`[tool.sqs-jobs] catalog`)."""
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
            return Project(root=directory.resolve(), catalog_ref=str(settings["catalog"]).strip())
    return None
