from __future__ import annotations

import pytest

from sqs_jobs.cli.console.security import ConsoleBindError, Guard, is_loopback


def test_loopback_consoles_need_their_access_token_too_and_answer_to_their_loopback_names() -> None:
    # Another account on the same host reaches 127.0.0.1 as well.
    guard = Guard.for_bind("127.0.0.1", 8080)
    assert guard.access_token and len(guard.access_token) >= 24
    assert guard.allowed_hosts == {"127.0.0.1:8080", "localhost:8080", "[::1]:8080"}
    assert guard.url == f"http://127.0.0.1:8080/?token={guard.access_token}"
    assert guard.url_for("queues/orders") == f"http://127.0.0.1:8080/queues/orders?token={guard.access_token}"
    assert not guard.access_valid(None, None)
    assert guard.access_valid(guard.access_token, None) and guard.access_valid(None, guard.access_token)
    assert guard.host_allowed("LOCALHOST:8080")
    assert not guard.host_allowed("localhost:8081")
    assert not guard.host_allowed("evil.example:8080")
    assert not guard.host_allowed(None)


def test_a_non_loopback_bind_gets_a_token_and_only_its_names() -> None:
    guard = Guard.for_bind("10.0.0.5", 9000, ["ops.internal"])
    assert guard.access_token and len(guard.access_token) >= 24
    assert guard.allowed_hosts == {"10.0.0.5:9000", "ops.internal:9000"}
    assert guard.url == f"http://10.0.0.5:9000/?token={guard.access_token}"
    assert not guard.access_valid(None, None)
    assert not guard.access_valid("nope", "nope")
    assert guard.access_valid(None, guard.access_token)
    assert guard.access_valid(guard.access_token, None)


def test_every_interface_needs_the_names_operators_use() -> None:
    with pytest.raises(ConsoleBindError, match="--allow-host NAME"):
        Guard.for_bind("0.0.0.0", 8080)
    guard = Guard.for_bind("0.0.0.0", 8080, ["console.internal"])
    assert guard.allowed_hosts == {"console.internal:8080"}
    assert guard.url.startswith("http://console.internal:8080/?token=")


def test_csrf_and_origin_checks() -> None:
    guard = Guard.for_bind("127.0.0.1", 8080)
    assert guard.csrf_valid(guard.csrf_token)
    assert not guard.csrf_valid(None)
    assert not guard.csrf_valid("")
    assert not guard.csrf_valid(guard.csrf_token + "x")
    assert guard.origin_allowed(None)  # same-origin GET navigations and some clients send none
    assert guard.origin_allowed("http://localhost:8080")
    assert not guard.origin_allowed("http://evil.example")
    assert not guard.origin_allowed("null")
    assert not guard.origin_allowed("https://127.0.0.1:8080")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("10.1.2.3", False), ("example.com", False)],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
