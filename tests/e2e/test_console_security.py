"""The console refuses what a foreign page or a stranger on the network could send it, over real HTTP."""

from __future__ import annotations

import http.client
import io
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from functions.catalog import CATALOG
from sqs_jobs.cli.console.security import ACCESS_COOKIE, CSRF_FIELD
from sqs_jobs.cli.console.server import ConsoleServer
from sqs_jobs.cli.queue_control import is_paused
from sqs_jobs.local.engine import LocalEngine
from tests.e2e.console_requests import console_request

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def engine() -> Iterator[LocalEngine]:
    with LocalEngine(port=0, worker_output=io.StringIO(), heartbeat_interval_s=3600, catalog=CATALOG) as running:
        yield running


@pytest.fixture
def console(engine: LocalEngine, tmp_path: Path) -> Iterator[ConsoleServer]:
    with ConsoleServer(engine.clients(), engine.stack_name, port=0, archive_dir=tmp_path, catalog=CATALOG) as server:
        yield server


def _request(
    console: ConsoleServer,
    method: str,
    path: str,
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> http.client.HTTPResponse:
    return console_request(console, method, path, form=form, headers=headers)[0]


def _csrf_token(console: ConsoleServer) -> str:
    _, page = console_request(console, "GET", "/queues/orders/pause")
    match = re.search(rf'name="{CSRF_FIELD}" value="([^"]+)"', page)
    assert match, "the confirmation page carries no CSRF token"
    return match.group(1)


def _orders_paused(engine: LocalEngine) -> bool:
    assert engine.deployment is not None
    return is_paused(engine.clients()("lambda"), engine.deployment.queues["orders"].arn)


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    engine: LocalEngine, console: ConsoleServer
) -> None:
    assert _request(console, "POST", "/queues/orders/pause", form={}).status == 403
    assert _request(console, "POST", "/queues/orders/pause", form={CSRF_FIELD: "guessed"}).status == 403
    assert not _orders_paused(engine)


def test_a_cancel_without_the_csrf_token_or_from_another_origin_is_refused_and_cancels_nothing(
    engine: LocalEngine, console: ConsoleServer
) -> None:
    form = {"job": "order_confirmation", "id": "3001"}
    assert _request(console, "POST", "/jobs/cancel", form=form).status == 403
    foreign = {"Origin": "http://evil.example"}
    assert (
        _request(
            console, "POST", "/jobs/cancel", form={**form, CSRF_FIELD: _csrf_token(console)}, headers=foreign
        ).status
        == 403
    )
    # Nothing was written: the job is not cancelled.
    _, page = console_request(console, "GET", "/jobs?job=order_confirmation&id=3001")
    assert "order_confirmation:3001: not found" in page
    done = _request(console, "POST", "/jobs/cancel", form={**form, CSRF_FIELD: _csrf_token(console)})
    assert done.status == 303 and "cancel=cancelled" in done.headers["Location"]
    _, page = console_request(console, "GET", "/jobs?job=order_confirmation&id=3001")
    assert "order_confirmation:3001: cancelled" in page


def test_a_post_from_another_origin_is_refused_even_with_the_token(engine: LocalEngine, console: ConsoleServer) -> None:
    token = _csrf_token(console)
    response = _request(
        console, "POST", "/queues/orders/pause", form={CSRF_FIELD: token}, headers={"Origin": "http://evil.example"}
    )
    assert response.status == 403
    assert not _orders_paused(engine)


def test_a_post_with_the_token_from_the_console_acts(engine: LocalEngine, console: ConsoleServer) -> None:
    token = _csrf_token(console)
    origin = f"http://127.0.0.1:{console.guard.port}"
    paused = _request(console, "POST", "/queues/orders/pause", form={CSRF_FIELD: token}, headers={"Origin": origin})
    assert paused.status == 303 and paused.headers["Location"].endswith("/queues/orders")
    assert _orders_paused(engine)
    assert _request(console, "POST", "/queues/orders/resume", form={CSRF_FIELD: token}).status == 303
    assert not _orders_paused(engine)


def test_a_foreign_host_header_is_refused(console: ConsoleServer) -> None:
    # DNS rebinding: evil.example resolves to 127.0.0.1, and the browser sends its own name as Host.
    response = _request(console, "GET", "/", headers={"Host": f"evil.example:{console.guard.port}"})
    assert response.status == 403
    assert _request(console, "GET", "/", headers={"Host": f"localhost:{console.guard.port}"}).status == 200


def test_pages_forbid_framing_and_caching(console: ConsoleServer) -> None:
    response = _request(console, "GET", "/")
    assert response.status == 200
    assert response.headers["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
    assert "script-src 'none'" in response.headers["Content-Security-Policy"]  # the console has no scripts
    assert response.headers["Cache-Control"] == "no-store"


def test_off_loopback_every_request_needs_the_printed_token(engine: LocalEngine, tmp_path: Path) -> None:
    with ConsoleServer(
        engine.clients(),
        engine.stack_name,
        host="0.0.0.0",
        port=0,
        allow_hosts=["console.test"],
        archive_dir=tmp_path,
        catalog=CATALOG,
    ) as console:
        token = console.guard.access_token
        assert token and f"?token={token}" in console.url and urlsplit(console.url).hostname == "console.test"
        port = console.guard.port
        host = {"Host": f"console.test:{port}"}
        anonymous = {**host, "Cookie": ""}
        assert _request(console, "GET", "/", headers=anonymous).status == 401
        assert _request(console, "GET", "/?token=wrong", headers=anonymous).status == 401
        first = _request(console, "GET", f"/?token={token}", headers=anonymous)
        assert first.status == 303
        cookie = first.headers["Set-Cookie"]
        assert cookie.startswith(f"{ACCESS_COOKIE}={token}") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert _request(console, "GET", "/", headers={**host, "Cookie": f"{ACCESS_COOKIE}={token}"}).status == 200
        assert _request(console, "GET", "/", headers={"Host": f"127.0.0.1:{port}"}).status == 403  # not its name


def test_on_loopback_too_every_request_needs_the_token_which_leaves_the_url_at_once(console: ConsoleServer) -> None:
    # Another account on the same host reaches 127.0.0.1 as well.
    anonymous = {"Cookie": ""}
    assert _request(console, "GET", "/", headers=anonymous).status == 401
    assert _request(console, "GET", "/queues/orders", headers=anonymous).status == 401
    token = console.guard.access_token
    first = _request(console, "GET", f"/queues/orders?token={token}&group_by=job", headers=anonymous)
    # The cookie, and a redirect to the same page without the token: out of the address bar and history.
    assert first.status == 303
    assert first.headers["Location"] == "/queues/orders?group_by=job"
    cookie = first.headers["Set-Cookie"]
    assert cookie.startswith(f"{ACCESS_COOKIE}={token}") and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert console.url == f"{console.base_url}?token={token}"


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
    ],
    ids=["cross-site", "same-site", "foreign-origin"],
)
def test_a_read_from_another_site_is_refused_before_it_scans_anything(
    console: ConsoleServer, headers: dict[str, str]
) -> None:
    # Each read scans a DLQ with the operator's credentials: a foreign page's GETs could hide its messages.
    assert _request(console, "GET", "/queues/orders", headers=headers).status == 403
    assert _request(console, "GET", "/queues/orders", headers={"Sec-Fetch-Site": "same-origin"}).status == 200
    assert _request(console, "GET", "/", headers={"Sec-Fetch-Site": "none"}).status == 200  # typed or bookmarked


def test_a_discard_archive_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    from sqs_jobs.cli.dlq import open_archive

    path = tmp_path / "archives" / "orders-discarded.jsonl"
    with open_archive(path) as sink:
        sink.write("{}\n")

    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_parallel_reads_of_a_dlq_each_see_every_dead_letter(engine: LocalEngine, console: ConsoleServer) -> None:
    # Reading a DLQ receives each message and hands it straight back; two scans at once each missed what the
    # other held. The console reads one DLQ one request at a time.
    import json
    from concurrent.futures import ThreadPoolExecutor

    assert engine.deployment is not None
    sqs = engine.clients()("sqs")
    for number in range(11):
        sqs.send_message(
            QueueUrl=engine.deployment.queues["orders"].url,
            MessageBody=json.dumps({"job": "order_confirmation", "id": f"missing-{number}"}),
        )
    assert engine.wait_until_idle(timeout_s=60)

    def dead_letters_shown(_view: int) -> str:
        page = console_request(console, "GET", "/queues/orders", timeout_s=120)[1]
        found = re.search(r"Dead letters: (\d+)", page)
        return found.group(1) if found else page[:300]

    with ThreadPoolExecutor(max_workers=8) as pool:
        shown = list(pool.map(dead_letters_shown, range(8)))

    assert shown == ["11"] * 8


def test_an_id_with_a_hidden_character_is_bad_input_shown_as_text(console: ConsoleServer) -> None:
    response, page = console_request(console, "GET", "/jobs?job=order_confirmation&id=%1B%5B2J%E2%80%AE")

    assert response.status == 400
    assert "contains U+001B" in page and "\u001b" not in page and "\u202e" not in page


def test_a_job_whose_key_needs_the_publishers_is_asked_for_it_not_answered_500(console: ConsoleServer) -> None:
    lookup, page = console_request(console, "GET", "/jobs?job=order_update_mail&id=1001")
    assert lookup.status == 400 and "give the key the publisher chose with --key" in page
    # The confirmation page only restates the request; its POST is where the key is needed.
    _, confirm = console_request(console, "GET", "/jobs/cancel?job=order_update_mail&id=1001")
    token = re.search(rf'name="{CSRF_FIELD}" value="([^"]+)"', confirm)
    assert token is not None
    response, page = console_request(
        console, "POST", "/jobs/cancel", form={"job": "order_update_mail", "id": "1001", CSRF_FIELD: token.group(1)}
    )
    assert response.status == 400 and "give the key the publisher chose with --key" in page
