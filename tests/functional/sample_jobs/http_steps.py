"""A durable job that calls an API inside its steps (`charge`, then `receipt`, each a POST to URL + its name), and
for IDs starting `outside-` once outside any step (refused). URL is the test's server."""

from __future__ import annotations

from typing import Any

from sqs_jobs.envelope import Envelope

URL: list[str] = []


def run(envelope: Envelope, context: Any) -> dict[str, int]:
    if envelope.id.startswith("outside-"):
        context.http.post(URL[0] + "/outside", json={"id": envelope.id})
    charged = context.step("charge", lambda: context.http.post(URL[0] + "/charge", json={"id": envelope.id}).status)
    sent = context.step("receipt", lambda: context.http.post(URL[0] + "/receipt", json={"id": envelope.id}).status)
    return {"charge": charged, "receipt": sent}
