"""The CLI reference ``docs/cli.md``, generated from the click tree of :data:`tilake.cli.main`.

Kept at the ``cli`` floor (it imports ``tilake.cli`` and click; nothing below ``cli`` may). Every command
and subcommand gets a section with its usage line, its help text, its arguments and one line per option
(the option's names and metavar, then its help with click's own ``[default: …]`` / ``[env var: …]``
suffixes, as ``tilake <cmd> --help`` prints them but without the terminal's line wrapping, so the file
does not depend on the terminal width). Hidden options and commands are left out, as ``--help`` does.

    python -m tilake.cli_docs            # rewrite docs/cli.md
    python -m tilake.cli_docs --check    # exit 1 when docs/cli.md differs from the click tree

``tests/test_docs.py`` regenerates the text in memory and compares it with the committed file.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import click

CLI_MD = Path(__file__).resolve().parent / "docs" / "cli.md"
HEADER = ("# CLI reference\n\n"
          "Generated from the click commands by `python -m tilake.cli_docs` (do not edit by hand; "
          "`tests/test_docs.py` fails when this file and the code differ). The topic pages say what the "
          "commands do: see the [README](../README.md#where-to-read-on).\n")


def walk(group: click.Command, name: str = "tilake") -> Iterator[Tuple[List[str], click.Command]]:
    """Every visible command of ``group`` depth-first, in click's listing order, as ``(path, command)``;
    ``path`` starts with ``name`` (``["tilake", "dumps", "analyze"]``)."""
    path = name.split()
    yield path, group
    if isinstance(group, click.Group):
        ctx = click.Context(group, info_name=path[-1])
        for sub in group.list_commands(ctx):
            cmd = group.get_command(ctx, sub)
            if cmd is None or getattr(cmd, "hidden", False):
                continue
            yield from walk(cmd, " ".join(path + [sub]))


def _ctx(path: List[str], cmd: click.Command) -> click.Context:
    parent = None
    for p in path[:-1]:
        parent = click.Context(click.Group(p), info_name=p, parent=parent)
    return click.Context(cmd, info_name=path[-1], parent=parent, terminal_width=10_000, max_content_width=10_000)


def _one_line(text: str) -> str:
    return " ".join((text or "").split())


def option_records(path: List[str], cmd: click.Command) -> List[Tuple[str, str]]:
    """``(names with metavar, help)`` per visible option of ``cmd`` (``--help`` included), as click's help
    formatter gets them (``Option.get_help_record``), whitespace folded to single spaces."""
    ctx = _ctx(path, cmd)
    out = []
    for param in cmd.get_params(ctx):
        if not isinstance(param, click.Option):
            continue
        rec = param.get_help_record(ctx)
        if rec is not None:
            out.append((_one_line(rec[0]), _one_line(rec[1])))
    return out


def render(group: click.Command = None) -> str:
    """The whole reference as Markdown text (deterministic: no terminal width, no machine facts).

    Raises nothing of its own; a help text that depends on the environment would make the file depend
    on it (the docs test then fails on another machine, which is the point)."""
    if group is None:
        from tilake.cli import main as group
    parts = [HEADER]
    for path, cmd in walk(group):
        ctx = _ctx(path, cmd)
        title = " ".join(path)
        parts.append(f"\n## `{title}`\n\n```\n{_one_line(cmd.get_usage(ctx))}\n```\n")
        text = (cmd.help or "").strip()
        if text:
            parts.append("\n" + "\n\n".join(_one_line(p) for p in text.split("\n\n")) + "\n")
        if cmd.epilog:
            parts.append("\n" + _one_line(cmd.epilog) + "\n")
        args = [p for p in cmd.params if isinstance(p, click.Argument)]
        if args:
            parts.append("\nArguments: " + ", ".join(
                f"`{a.make_metavar(ctx) if _takes_ctx(a) else a.make_metavar()}`" for a in args) + "\n")
        opts = option_records(path, cmd)
        if opts:
            parts.append("\n| option | help |\n|---|---|\n")
            for names, help_text in opts:
                parts.append(f"| `{_cell(names)}` | {_cell(help_text)} |\n")
        if isinstance(cmd, click.Group):
            subs = [" ".join(p) for p, c in walk(cmd, title) if len(p) == len(path) + 1]
            if subs:
                parts.append("\nSubcommands: " + ", ".join(f"`{s}`" for s in subs) + "\n")
    return "".join(parts)


def _takes_ctx(arg: click.Argument) -> bool:   # click ≥ 8.2 passes ctx to make_metavar
    import inspect
    return "ctx" in inspect.signature(arg.make_metavar).parameters


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main(argv: Optional[List[str]] = None) -> int:
    """Write :data:`CLI_MD` (``--check``: only compare; exit status 1 when it differs). ``--docs PATH``: the
    file to write or compare instead (a checkout's ``docs/cli.md`` when tilake is installed as a copy)."""
    argv = sys.argv[1:] if argv is None else argv
    target = Path(argv[argv.index("--docs") + 1]) if "--docs" in argv[:-1] else CLI_MD
    text = render()
    if "--check" in argv:
        same = target.is_file() and target.read_text(encoding="utf-8") == text
        print(f"{target}: {'up to date' if same else 'out of date: run python -m tilake.cli_docs'}")
        return 0 if same else 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
