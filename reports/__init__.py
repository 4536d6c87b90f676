"""Reports: Markdown/HTML/CSV/xlsx writers and the terminal views.

Importing this package makes every rich ``Text`` show control characters instead of acting on them: rich already
drops BEL, backspace, VT, FF and CR from text; ESC (the start of every terminal sequence: colours, titles,
cursor moves, OSC 8 links) and the other C0/C1 codes are added to that table, written ``\\xNN``. Kernel names,
paths and run fields from someone else's capture then cannot recolour, retitle or clear the user's terminal.
rich's own styles and live displays are segments rendered apart from text, so they are not affected.
"""
from __future__ import annotations


def _escape_controls_in_rich_text() -> None:
    try:
        from rich import control
    except ImportError:   # pragma: no cover - rich is a dependency
        return
    table = control._CONTROL_STRIP_TRANSLATE   # the dict strip_control_codes() binds as its default
    for code in [*range(0, 32), 127, *range(128, 160)]:
        if code in (9, 10) or code in control.STRIP_CONTROL_CODES:
            continue
        table[code] = f"\\x{code:02x}"


_escape_controls_in_rich_text()
