"""sqs_jobs.visible: what doesn't show as itself is written as an escape; everything else is left as it is."""

from __future__ import annotations

import pytest

from sqs_jobs.cli.cli_output import text_lines
from sqs_jobs.visible import describe, first_hidden, visible


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("order 1001", "order 1001"),
        ("注文-📦 café", "注文-📦 café"),  # letters, emoji and accents of any script show as themselves
        ("a\u00a0b", "a\u00a0b"),  # a no-break space is a space
        ("\u001b]52;c;ZXZpbA==\u0007", "\\x1b]52;c;ZXZpbA==\\x07"),
        ("\u009b2J", "\\x9b2J"),
        ("txt\u202egpj.exe", "txt\\u202egpj.exe"),
        ("10\u200b01\ufeff", "10\\u200b01\\ufeff"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("line\u2028break", "line\\u2028break"),
        ("a\nb\tc\rd", "a\\x0ab\\x09c\\x0dd"),
    ],
)
def test_hidden_characters_become_escapes_and_nothing_else_changes(raw: str, expected: str) -> None:
    assert visible(raw) == expected


def test_multi_line_text_keeps_its_lines_but_never_a_carriage_return() -> None:
    assert visible("Traceback:\n\tline 1\r\u001b[2K", keep_newlines=True) == "Traceback:\n\tline 1\\x0d\\x1b[2K"


def test_the_first_hidden_character_is_named_for_an_error_message() -> None:
    assert first_hidden("invoice\u202eFDP.exe") == (7, "\u202e")
    assert first_hidden("plain") is None
    assert describe("\u202e") == "U+202E (RIGHT-TO-LEFT OVERRIDE)"
    assert describe("\u001b") == "U+001B (a control character)"


def test_text_output_escapes_tabs_newlines_and_every_other_hidden_character() -> None:
    (line,) = text_lines({"id": "a\tb\nc\\d\u001b[31m\u202e"})
    assert line == "a\\tb\\nc\\\\d\\x1b[31m\\u202e"
