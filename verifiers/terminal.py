"""Model and environment text on the user's terminal: shown, never obeyed.

A completion is untrusted bytes. Printed raw, ``ESC ]52`` writes the user's clipboard,
``ESC [2J`` clears the screen, ``ESC ]0`` retitles the window, ``ESC ]8`` hides a link behind
innocent text, and bidirectional overrides reorder what a reviewer reads. Every view that shows
such text (vf-eval's progress and summary, vf-view, vf-train's sample tables) passes it through
`escape_controls` and prints it as `rich.text.Text`, so it is neither a terminal control sequence
nor rich markup (``[/bold]`` in a completion is shown, not parsed). Newlines and tabs stay: they
are how text is laid out.
"""

from __future__ import annotations

from rich.text import Text

__all__ = ["escape_controls", "plain_text"]

_KEEP = {"\n", "\t"}
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_TABLE: dict[int, str] = {
    code: f"\\x{code:02x}" for code in (*range(0x00, 0x20), *range(0x7F, 0xA0)) if chr(code) not in _KEEP
}
_TABLE.update({code: f"\\u{code:04x}" for code in _BIDI})


def escape_controls(text: str) -> str:
    r"""``text`` with every control character written as its escape (``\x1b``, ``\u202e``).

    C0 and C1 controls, DEL and the bidirectional formatting characters are replaced; newlines
    and tabs are kept. Printable text, including any non-Latin script and emoji, is unchanged.
    """
    return text.translate(_TABLE)


def plain_text(text: object, style: str = "") -> Text:
    """A `Text` of ``str(text)`` with controls escaped: safe to print and never parsed as markup."""
    return Text(escape_controls(str(text)), style=style)
