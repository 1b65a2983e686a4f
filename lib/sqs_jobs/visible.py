"""Characters that don't show as themselves, and text made safe for a person to read.

A producer controls what a message holds (its job name, its IDs, the error its job raised), and dead letters carry
it to an operator's terminal, browser and mail. Controls (C0, DEL, C1: ESC starts terminal sequences that write the
clipboard, retitle the window or hide lines), format characters (bidi overrides and isolates that reorder what
follows, zero-width characters, tags) and the line and paragraph separators are never shown raw: `visible` writes
each as an escape (`\\u001b`, `\\u202e`), and the envelope refuses them in `job`, `id` and `key`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

# Unicode general categories of the characters that are not shown as themselves: controls, format characters,
# line and paragraph separators, and surrogates (a lone one is not text at all).
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def is_hidden(char: str) -> bool:
    return unicodedata.category(char) in HIDDEN_CATEGORIES


def first_hidden(value: str) -> tuple[int, str] | None:
    """The position and character of `value`'s first hidden character, or None."""
    if value.isprintable():  # the fast path: no Cc, Cf, Zl, Zp, Cs (nor Zs, Co, Cn, which are shown)
        return None
    for position, char in enumerate(value):
        if is_hidden(char):
            return position, char
    return None


def describe(char: str) -> str:
    """`U+202E (RIGHT-TO-LEFT OVERRIDE)`: a character named so a person can see which it is."""
    name = unicodedata.name(char, "") or {"Cc": "a control character", "Cs": "a surrogate"}.get(
        unicodedata.category(char), "unnamed"
    )
    return f"U+{ord(char):04X} ({name})"


def escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as text with every hidden character written as its escape, so nothing in it acts on the terminal
    or browser that shows it. `keep_newlines` keeps line breaks (and tabs) of multi-line text such as a
    traceback; a carriage return is always escaped (it would let a line overwrite itself)."""
    text = value if isinstance(value, str) else str(value)
    if first_hidden(text) is None:
        return text
    kept = "\n\t" if keep_newlines else ""
    return "".join(escape(char) if char not in kept and is_hidden(char) else char for char in text)


def hidden_ranges(limit: int = 0x110000) -> Iterable[tuple[int, int]]:
    """The code points below `limit` that are hidden, as inclusive ranges (for a schema's character class)."""
    start: int | None = None
    for code in range(limit):
        hidden = unicodedata.category(chr(code)) in HIDDEN_CATEGORIES
        if hidden and start is None:
            start = code
        elif not hidden and start is not None:
            yield start, code - 1
            start = None
    if start is not None:
        yield start, limit - 1
