"""The console's pages and actions (Flask, server-rendered, no JavaScript).

Reading pages are GETs; every action is a POST from a page that previewed it, carrying the CSRF token
(sqs_jobs.cli.console.security). Long actions run as operations whose page follows them.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import botocore.exceptions
from flask import Flask, Response, abort, g, redirect, render_template, request, send_file, url_for
from markupsafe import Markup
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as WerkzeugResponse

from sqs_jobs.cli.batch_lookup import BadBatchIdError, BatchLookupError, BatchNotFoundError
from sqs_jobs.cli.console.backend import ConsoleBackend, group_id, to_json
from sqs_jobs.cli.console.charts import FRAME_HEIGHT, FRAME_WIDTH
from sqs_jobs.cli.console.operations import Operations
from sqs_jobs.cli.console.security import ACCESS_COOKIE, CSRF_FIELD, SAFE_METHODS, SECURITY_HEADERS, Guard
from sqs_jobs.cli.discovery import DiscoveryError
from sqs_jobs.cli.dlq import NO_TENANT, DlqError, group
from sqs_jobs.cli.durable_shown import durable_lines
from sqs_jobs.cli.job_cancel import CancelOutcome
from sqs_jobs.cli.job_lookup import JobKeyUnknownError, JobLookupError
from sqs_jobs.cli.queue_control import QueueControlError
from sqs_jobs.errors import EnvelopeError
from sqs_jobs.specs import UnknownQueueError
from sqs_jobs.visible import visible
from sqs_jobs.worker.names import LifeState

# Errors an operator can act on: shown as one line on the page (and in an operation's result), never a traceback.
OPERATOR_ERRORS: tuple[type[Exception], ...] = (
    DiscoveryError,
    DlqError,
    JobLookupError,
    BatchLookupError,
    QueueControlError,
    botocore.exceptions.BotoCoreError,
    botocore.exceptions.ClientError,
)
OVERVIEW_REFRESH_S = 15
# The CLI's lower bound for a client-side redrive's rate (`jobctl dlq redrive --rate`).
MIN_RATE_PER_S = 0.1


def when(value: datetime | str | None) -> str:
    """A moment as `2026-12-02 04:19:04 UTC` (seconds are enough on a page); ISO text is parsed first."""
    if value is None or value == "":
        return "unknown"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def number(value: float | None) -> str:
    if value is None:
        return "no data"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def shown_in_page(value: Any) -> Any:
    if isinstance(value, Markup):  # already HTML (tojson): its text is made visible, its markup kept
        return Markup(visible(str(value), keep_newlines=True))
    if isinstance(value, str):
        return visible(value, keep_newlines=True)
    return value


def describe_error(error: BaseException) -> str | None:
    return str(error) if isinstance(error, (*OPERATOR_ERRORS, EnvelopeError)) else None


def create_app(backend: ConsoleBackend, guard: Guard, archive_dir: Path) -> Flask:
    app = Flask(__name__)
    # Every {{ value }} of every page, before autoescaping: hidden characters as escapes (sqs_jobs.visible), so
    # what a producer wrote can't reorder or hide text in the operator's browser. Line breaks stay (<pre>).
    app.jinja_options = {**app.jinja_options, "finalize": shown_in_page}
    _guard(app, guard)
    _error_pages(app)

    @app.context_processor
    def common() -> dict[str, Any]:
        return {
            "csrf_field": CSRF_FIELD,
            "stack": backend.stack,
            "queues": backend.catalog.queue_names,
            "no_tenant": NO_TENANT,
        }

    app.add_template_filter(when)
    app.add_template_filter(number)
    # A durable job's execution, as `jobctl job show` says it (sqs_jobs.cli.durable_shown).
    app.add_template_global(durable_lines)
    _reading_pages(app, backend)
    _actions(app, backend, Operations(describe_error), archive_dir)
    return app


def _guard(app: Flask, guard: Guard) -> None:
    @app.before_request
    def check_request() -> WerkzeugResponse | None:
        if not guard.host_allowed(request.host):
            abort(403, description=f"Host {request.host!r} is not this console's address")
        if not guard.fetch_site_allowed(request.headers.get("Sec-Fetch-Site")) or not guard.origin_allowed(
            request.headers.get("Origin")
        ):
            abort(403, description="cross-site request refused: open the console from the URL it printed")
        if not guard.access_valid(request.cookies.get(ACCESS_COOKIE), request.args.get("token")):
            abort(401, description="this console needs the access token that `jobctl console` printed")
        if request.args.get("token") is not None and request.method in SAFE_METHODS:
            # Exchanged once: the cookie from now on, and the token out of the address bar and history.
            others = {name: value for name, value in request.args.items(multi=True) if name != "token"}
            target = request.path + (f"?{urlencode(others)}" if others else "")
            response = redirect(target, code=303)
            response.set_cookie(ACCESS_COOKIE, guard.access_token, httponly=True, samesite="Strict")
            return response
        if request.method not in SAFE_METHODS and not guard.csrf_valid(request.form.get(CSRF_FIELD)):
            abort(403, description="missing or wrong CSRF token: reload the page and try again")
        g.csrf_token = guard.csrf_token
        return None

    @app.after_request
    def harden(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response


def _error_pages(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> tuple[str, int]:
        return render_template("error.html", title=error.name, message=error.description), error.code or 500

    @app.errorhandler(UnknownQueueError)
    def unknown_queue(error: UnknownQueueError) -> tuple[str, int]:
        return render_template("error.html", title="Unknown queue", message=str(error)), 404

    @app.errorhandler(BatchNotFoundError)
    def no_batch(error: BatchNotFoundError) -> tuple[str, int]:
        return render_template("error.html", title="No such batch", message=str(error)), 404

    @app.errorhandler(EnvelopeError)
    @app.errorhandler(JobKeyUnknownError)
    @app.errorhandler(BadBatchIdError)
    def bad_input(error: Exception) -> tuple[str, int]:
        # What the operator typed (a job's ID with a hidden character): their input, not a failure to act.
        return render_template("error.html", title="Bad input", message=str(error)), 400

    for error_type in OPERATOR_ERRORS:

        @app.errorhandler(error_type)
        def could_not_check(error: BaseException) -> tuple[str, int]:
            return render_template("error.html", title="Could not read or act", message=str(error)), 502


def _reading_pages(app: Flask, backend: ConsoleBackend) -> None:
    @app.get("/")
    def overview() -> str:
        return render_template(
            "overview.html",
            overviews=backend.overview(),
            refresh_s=OVERVIEW_REFRESH_S,
            now=datetime.now(UTC),
            frame_width=FRAME_WIDTH,
            frame_height=FRAME_HEIGHT,
        )

    @app.get("/queues/<queue>")
    def queue_page(queue: str) -> str:
        backend.catalog.queue(queue)
        letters = backend.dead_letters(queue)
        return render_template(
            "queue.html",
            queue=queue,
            status=backend.status(queue),
            groups=backend.groups(letters),
            tenants=group(letters, by="tenant"),
            letters=letters,
            group_of={letter.message_id: group_id(letter) for letter in letters},
        )

    @app.get("/queues/<queue>/messages/<message_id>")
    def message_page(queue: str, message_id: str) -> str:
        letter = backend.letter(queue, message_id)
        if letter is None:
            abort(404, description=f"no message {message_id} in the DLQ of {queue} (redriven or discarded?)")
        return render_template("message.html", queue=queue, letter=letter, evidence=letter.to_dict())

    @app.get("/queues/<queue>/preview")
    def preview(queue: str) -> str:
        action = request.args.get("action", "")
        if action not in ("redrive", "discard"):
            abort(400, description=f"action {action!r}: accepted: redrive, discard")
        ids = request.args.getlist("ids")
        group = request.args.get("group")
        if not ids and not group and request.args.get("all") != "1":
            abort(400, description="nothing selected: choose messages, a group, or all")
        selection = backend.select(queue, group=group, ids=ids or None)
        return render_template("preview.html", action=action, selection=selection, queue=queue)

    @app.get("/jobs")
    def job_page() -> str:
        job, entity_id = request.args.get("job", "").strip(), request.args.get("id", "").strip()
        key = request.args.get("key", "").strip() or None
        tenant = request.args.get("tenant", "").strip() or None
        found = None
        if job and entity_id:
            try:
                queue = backend.catalog.queue_for_job(job).name
            except KeyError:
                abort(400, description=f"unknown job {job!r}; accepted: {', '.join(backend.catalog.job_names)}")
            found = backend.find_job(queue, job, entity_id, key, tenant)
        try:
            said = CancelOutcome(request.args.get("cancel", ""))
        except ValueError:
            said = None
        return render_template(
            "job.html",
            job=job,
            entity_id=entity_id,
            key=key or "",
            tenant=tenant or "",
            found=found,
            jobs=backend.catalog.job_names,
            cancel_outcome=said,
        )

    @app.get("/batches")
    def batch_page() -> str:
        batch_id = request.args.get("id", "").strip()
        found = backend.find_batch(batch_id) if batch_id else None
        return render_template("batch.html", batch_id=batch_id, found=found)

    @app.get("/life")
    def life_page() -> str:
        job = request.args.get("job", "").strip() or None
        text = request.args.get("q", "").strip() or None
        if job is not None and job not in backend.catalog.job_names:
            abort(400, description=f"unknown job {job!r}; accepted: {', '.join(backend.catalog.job_names)}")
        in_flight = backend.in_flight(job, text)
        schedules = backend.schedules()
        # Dead letters only for a search: each DLQ searched is scanned (docs/console.md).
        dead = backend.dead_letters_matching(job, text) if job or text else None
        scheduled = [row for row in schedules.rows if _schedule_matches(row, job, text)]
        return render_template(
            "life.html",
            job=job or "",
            text=text or "",
            jobs=backend.catalog.job_names,
            in_flight=in_flight,
            states=list(LifeState),
            scheduled=scheduled,
            schedules_truncated=schedules.truncated,
            schedule_calls=1 + len(schedules.rows),
            dead=dead,
            dlqs_searched=1 if job else len(backend.catalog.queue_names),
            now=datetime.now(UTC),
        )

    @app.get("/jobs/cancel")
    def confirm_cancel() -> str:
        job, entity_id, key, undo = _job_form(request.args, backend)
        tenant = request.args.get("tenant", "").strip()
        return render_template("cancel.html", job=job, entity_id=entity_id, key=key or "", tenant=tenant, undo=undo)

    @app.get("/queues/<queue>/<any(pause, resume):action>")
    def confirm_switch(queue: str, action: str) -> str:
        backend.catalog.queue(queue)
        return render_template("switch.html", queue=queue, action=action, status=backend.status(queue))


def _actions(app: Flask, backend: ConsoleBackend, operations: Operations, archive_dir: Path) -> None:
    @app.post("/queues/<queue>/redrive")
    def redrive(queue: str) -> Response:
        selection = backend.select(queue, ids=request.form.getlist("ids"))
        if not selection.letters:
            abort(409, description="none of the chosen messages is in the DLQ any more: nothing to redrive")
        if selection.not_idempotent and request.form.get("allow_non_idempotent") != "yes":
            abort(
                409,
                description=f"not known to be idempotent: {', '.join(selection.not_idempotent)}; a redrive may run "
                "them twice. Check them, then confirm with 'run them again anyway' ticked",
            )
        rate = _rate(request.form.get("rate", ""))
        operation = operations.start(
            "redrive",
            queue,
            len(selection.ids),
            lambda op: backend.redrive(queue, selection.ids, rate, op),
        )
        return redirect(url_for("operation_page", operation_id=operation.id), code=303)  # type: ignore[return-value]

    @app.post("/queues/<queue>/discard")
    def discard(queue: str) -> Response:
        selection = backend.select(queue, ids=request.form.getlist("ids"))
        if not selection.letters:
            abort(409, description="none of the chosen messages is in the DLQ any more: nothing to discard")
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")

        def work(op: Any) -> dict[str, Any]:
            archive = archive_dir / f"{queue}-discarded-{stamp}-{op.id}.jsonl"
            return backend.discard(queue, selection.ids, archive, op)

        operation = operations.start("discard", queue, len(selection.ids), work)
        return redirect(url_for("operation_page", operation_id=operation.id), code=303)  # type: ignore[return-value]

    @app.get("/operations/<operation_id>")
    def operation_page(operation_id: str) -> str:
        operation = operations.get(operation_id)
        if operation is None:
            abort(404, description="no such operation (the console was restarted?)")
        return render_template("operation.html", operation=operation, result_json=to_json(operation.result))

    @app.get("/operations/<operation_id>/archive")
    def operation_archive(operation_id: str) -> Response:
        operation = operations.get(operation_id)
        if operation is None or operation.archive is None:
            abort(404, description="this operation has no archive")
        return send_file(Path(operation.archive).resolve(), mimetype="application/x-ndjson", as_attachment=True)

    @app.post("/jobs/cancel")
    def cancel_job() -> Response:
        job, entity_id, key, undo = _job_form(request.form, backend)
        tenant = request.form.get("tenant", "").strip() or None
        result = backend.cancel(job, entity_id, key, undo=undo, tenant=tenant)
        target = {
            "job": job,
            "id": entity_id,
            "cancel": result.outcome.value,
            **({"key": key} if key else {}),
            **({"tenant": tenant} if tenant else {}),
        }
        return redirect(url_for("job_page") + "?" + urlencode(target), code=303)  # type: ignore[return-value]

    @app.post("/queues/<queue>/pause")
    def pause(queue: str) -> Response:
        backend.pause(queue)
        return redirect(url_for("queue_page", queue=queue), code=303)  # type: ignore[return-value]

    @app.post("/queues/<queue>/resume")
    def resume(queue: str) -> Response:
        backend.resume(queue)
        return redirect(url_for("queue_page", queue=queue), code=303)  # type: ignore[return-value]


def _job_form(values: Any, backend: ConsoleBackend) -> tuple[str, str, str | None, bool]:
    """The job, ID, publisher's key and undo flag a cancel names (a query string or a form)."""
    job, entity_id = values.get("job", "").strip(), values.get("id", "").strip()
    if job not in backend.catalog.job_names:
        abort(400, description=f"unknown job {job!r}; accepted: {', '.join(backend.catalog.job_names)}")
    if not entity_id:
        abort(400, description="no ID: a cancel names a job and its ID")
    return job, entity_id, values.get("key", "").strip() or None, values.get("undo") == "1"


def _schedule_matches(row: dict[str, Any], job: str | None, text: str | None) -> bool:
    if job and row.get("job") != job:
        return False
    if text:
        needle = text.casefold()
        return any(needle in str(row.get(field) or "").casefold() for field in ("id", "name"))
    return True


def _rate(value: str) -> float | None:
    """The redrive's rate limit from the form: messages per second, at least 0.1; empty for none."""
    if not value.strip():
        return None
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if not (math.isfinite(rate) and rate >= MIN_RATE_PER_S):
        abort(400, description=f"rate {value!r}: messages per second, at least {MIN_RATE_PER_S} (or empty: no limit)")
    return rate
