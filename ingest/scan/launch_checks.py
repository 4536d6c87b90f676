"""Warnings about how a verl launch command will run, given before ``tilake scan`` runs it.

Each names a way the run will not happen on this machine, or will end with an exit status that
does not say whether training worked (bash(1): "Pipelines" — the status of a pipeline is its last
command's unless ``pipefail`` is set; "The Set Builtin" — ``-u`` makes an unset variable's
expansion an error that stops a non-interactive shell; ``ray job submit --no-wait`` returns once
the job is submitted, Ray docs "Ray Jobs CLI API Reference").
"""
from __future__ import annotations

import re
from typing import List, Sequence, Tuple

from tilake.ingest.scan.bash_tree import Command
from tilake.ingest.scan.verl_config import LaunchCommand

#: a Hydra override word (``a.b=c``, ``+a.b=c``, ``++a=c``): a dotted key, or a ``+``-prefixed one
_OVERRIDE_RE = re.compile(r"^['\"]?(\+{1,2}[A-Za-z_][\w.@/-]*|[A-Za-z_][\w@/-]*\.[\w.@/-]+)=")

#: words that pass the script's own arguments on (``"$@"`` and its spellings)
PASSTHROUGH_RAW = {"$@", '"$@"', "$*", '"$*"', "${@}", '"${@}"'}


def launch_warnings(cmd: Command, launch: LaunchCommand, opts: frozenset, commands: Sequence[Command],
                    unbound: Sequence[Tuple[int, str]], text: str) -> List[str]:
    """Reasons the run will not happen here, or its exit status will lie.

    Args:
        cmd: the launch command. launch: its reading. opts: shell options in force there
            (``u``, ``pipefail``). commands: every command of the script (for a stranded ``"$@"``).
        unbound: ``(line, name)`` of variables expanded while ``set -u`` was on and unset, before or
            in the launch command. text: the script.
    Returns:
        one line per problem, each starting ``line N:``.
    """
    out: List[str] = []
    words = [w.raw for w in cmd.words]
    if "ray" in words:
        k = words.index("ray")
        tail = words[k:]
        if tail[1:3] == ["job", "submit"]:
            before = tail[:tail.index("--")] if "--" in tail else tail
            if "--no-wait" in before:
                out.append(f"line {cmd.line}: `ray job submit --no-wait` returns as soon as the job is submitted: "
                           "training runs on the Ray cluster, not in this run, so the run ends before any capture "
                           "exists (drop --no-wait, or run the python command directly)")
            else:
                out.append(f"line {cmd.line}: `ray job submit` runs the job on the Ray cluster: its profiler "
                           "output lands on the cluster's nodes, not necessarily on this machine")
    if cmd.pipeline and cmd.pipe_index < len(cmd.pipeline) - 1 and "pipefail" not in opts:
        last = cmd.pipeline[-1]
        out.append(f"line {cmd.line}: the launch command is piped into `{last}` without `set -o pipefail`: the "
                   f"script's exit status is {last}'s (0) even when training fails (add `set -o pipefail`)")
    if cmd.pipeline and cmd.pipe_index < len(cmd.pipeline) - 1:
        for other in commands:
            if other.pipeline != cmd.pipeline or other.pipe_index <= cmd.pipe_index or other.line < cmd.line:
                continue
            stray = [w.raw for w in other.words[1:] if _OVERRIDE_RE.match(w.raw)]
            if stray:
                out.append(f"line {other.line}: {', '.join('`' + w + '`' for w in stray[:3])}"
                           f"{' …' if len(stray) > 3 else ''} after `| {other.pipeline[other.pipe_index]}` "
                           f"{'is an argument' if len(stray) == 1 else 'are arguments'} of "
                           f"{other.pipeline[other.pipe_index]}, not of the launch command: verl never sees "
                           f"{'it' if len(stray) == 1 else 'them'} (move the pipe to the end of the command)")
            break
    seen = set()
    for line, name in unbound:
        if name in seen:
            continue
        seen.add(name)
        out.append(f"line {line}: `set -u` is on and {name} is unset there: bash stops the script at this line, "
                   f"before the launch command (set {name}, e.g. `{name}=... tilake scan ...`)")
    for other in commands:
        if other.line <= cmd.line or other.conditional or other.in_function or not other.words:
            continue
        if other.words[0].raw in PASSTHROUGH_RAW and _follows(text, cmd, other):
            out.append(f"line {other.line}: `{other.words[0].raw}` stands alone: line {other.line - 1} has no "
                       "trailing `\\`, so the launch command ends there and the script's arguments never reach "
                       "it (bash then runs them as a command of their own)")
    return out


def _follows(text: str, cmd: Command, other: Command) -> bool:
    """Whether only blank or comment lines separate the launch command's end from ``other``."""
    end = max(t.end for t in cmd.words + cmd.redirs)
    between = text[end:other.words[0].start]
    return all(not ln.strip() or ln.strip().startswith("#") for ln in between.splitlines()[1:])
