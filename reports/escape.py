"""Escaping for what reports did not write themselves: kernel/op names, model ids, card values, paths.

Markdown (``.md`` reports) is rendered by viewers that pass raw HTML through, and its tables
split on ``|`` and end at a newline, so every value a template prints goes through
:func:`md_text` (the Jinja ``finalize`` hook of :func:`markdown_env`; values the report builds
itself, such as the grade ``<span>``, are :class:`markupsafe.Markup` and pass unchanged).
CSV cells that a spreadsheet would run as a formula are neutralised by :func:`csv_cell`, the
rule of OWASP's "CSV Injection" page: a cell starting with ``=``, ``+``, ``-``, ``@``, tab or
carriage return gets a leading ``'`` (Excel and LibreOffice then show it as text). Control characters
(ESC, which starts terminal sequences, and the other C0/C1 codes) are written as ``\\xNN`` in every
Markdown, CSV and xlsx cell (:func:`tilake.files.escape_controls`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable, Union

from markupsafe import Markup

from tilake.files import FORMULA_START, csv_text, escape_controls

_MD = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "|": "\\|", "\\": "\\\\",
                     "[": "\\[", "]": "\\]", "\r": " ", "\n": " "})
_FORMULA_START = FORMULA_START


def md_text(value: Any) -> Markup:
    """``value`` as inline Markdown text: ``& < >`` as entities, ``| \\ [ ]`` backslash-escaped,
    newlines (``\\n``, ``\\r``) as spaces, so it can neither open HTML nor leave its table cell.

    ``Markup`` values (built by tilake itself) are returned unchanged.
    """
    if isinstance(value, Markup):
        return value
    return Markup(escape_controls(str(value).replace("\r\n", " ").translate(_MD)))


def md_code(value: Any) -> Markup:
    """``value`` as a Markdown code span: the fence is one backtick longer than any backtick run
    inside (CommonMark §6.1), newlines become spaces and ``|`` is ``\\|`` (GFM tables split on a bare
    ``|`` even inside code).

    Code-span content is shown literally, so an entity would print as ``&lt;``: a value holding
    ``<``, ``>`` or ``&`` is written as escaped plain text (:func:`md_text`) instead, which renders
    the characters themselves and never raw HTML.
    """
    if re.search(r"[<>&]", str(value)):
        return md_text(value)
    text = escape_controls(str(value).replace("\r\n", " ")).replace("\r", " ").replace("\n", " ").replace("|", "\\|")
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return Markup(f"{fence}{pad}{text}{pad}{fence}")


def md_block(value: Any, info: str = "") -> Markup:
    """``value`` as a fenced code block (newlines kept): the fence is longer than any backtick run
    inside, so the text cannot close it early; content of a fenced block is never parsed as HTML."""
    text = escape_controls(str(value).replace("\r\n", "\n").replace("\r", "\n"))
    runs = [len(r) for r in re.findall(r"`{3,}", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return Markup(f"{fence}{info}\n{text}\n{fence}")


def md_join(items: Iterable[Any], sep: str = "") -> Markup:
    """Jinja ``join`` for Markdown: each item escaped with :func:`md_text`."""
    return Markup(md_text(sep)).join(md_text(i) for i in items)


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet will not evaluate: text starting with ``= + - @``, tab, CR (or their
    full-width forms) gets a leading ``'``, control characters are ``\\xNN``; other values are returned
    unchanged (:func:`tilake.files.csv_text`)."""
    return csv_text(value)


def markdown_env(templates: Union[str, Path], **kw):
    """A Jinja environment for Markdown templates: every ``{{ … }}`` goes through :func:`md_text`.

    ``autoescape`` is on so macro output and :class:`Markup` values are not escaped twice;
    ``join`` escapes each item; filters ``code`` (:func:`md_code`) and ``block`` (:func:`md_block`)
    format values as code. Other keyword arguments go to ``jinja2.Environment``.
    """
    from jinja2 import Environment, FileSystemLoader

    env = Environment(loader=FileSystemLoader(str(templates)), autoescape=True, finalize=md_text, **kw)
    env.filters.update(join=md_join, code=md_code, block=md_block, cell=md_text)
    return env
