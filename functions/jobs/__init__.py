"""The jobs: one module each, named by `JobSpec.handler` in the catalog.

A job module defines `run(envelope, context) -> dict | None` and may define `idempotency_key(envelope) -> str`
(the business key within the job, by default the ID; the runtime records it as `<job>:<key>`).
It re-reads current state by the envelope's ID, raises PermanentError subclasses for what can never succeed,
and uses only the clients and resources its JobContext hands it.
"""
