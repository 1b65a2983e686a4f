"""Local stand-ins of the app's endpoints: `Endpoint(standin="module:callable")` in the catalog makes the local
engine start one and give jobs its URL, so a team runs its jobs locally without editing the engine.

The callable is called with `host`, `chaos` (the engine's fault injection, or None) and the options given on
the command line (`jobctl local --standin NAME:key=value,...`), all strings; it returns a `StandIn`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol

from sqs_jobs.resources import Endpoint
from sqs_jobs.specs import Catalog


class StandIn(Protocol):
    """What the engine needs of a stand-in: start serving, its base URL once started, stop promptly."""

    @property
    def url(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


class StandInError(ValueError):
    """A stand-in that can't be loaded or started with the options given; the message says which and why."""


def parse_standin_option(text: str) -> tuple[str, dict[str, str]]:
    """`NAME:key=value,key=value` -> (NAME, {key: value})."""
    name, _, rest = text.partition(":")
    options: dict[str, str] = {}
    for part in filter(None, rest.split(",")):
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            raise StandInError(f"stand-in option {part!r} of {name!r} is not key=value (e.g. {name}:mode=hang)")
        options[key.strip()] = value.strip()
    if not name.strip():
        raise StandInError(f"stand-in option {text!r} names no endpoint: NAME:key=value,... expected")
    return name.strip(), options


def build_standins(
    catalog: Catalog, *, host: str, chaos: Any, options: Mapping[str, Mapping[str, str]]
) -> dict[str, StandIn]:
    """A stand-in per endpoint of the catalog that declares one, built (not started) with its options."""
    endpoints = {spec.name: spec for spec in catalog.resources if isinstance(spec, Endpoint) and spec.standin}
    unknown = sorted(set(options) - set(endpoints))
    if unknown:
        raise StandInError(
            f"no stand-in named {', '.join(map(repr, unknown))}; endpoints with one: {', '.join(endpoints) or 'none'}"
        )
    built: dict[str, StandIn] = {}
    for name, spec in endpoints.items():
        assert spec.standin is not None
        module_name, _, attribute = spec.standin.partition(":")
        try:
            factory = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise StandInError(f"endpoint {name!r}: stand-in {spec.standin!r} can't be loaded: {error}") from None
        try:
            built[name] = factory(host=host, chaos=chaos, **options.get(name, {}))
        except (TypeError, ValueError) as error:
            raise StandInError(f"endpoint {name!r}: stand-in {spec.standin!r} refused its options: {error}") from None
    return built
