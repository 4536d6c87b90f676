"""Stage 1a of ``tilake scan``: read a verl RL launch script without running it.

The script's bash syntax comes from ``tree-sitter-bash`` (:mod:`.bash_tree`); its plain
assignments are then evaluated in order by our own :class:`~.shell.Shell` (``${VAR:-x}``
defaults, ``export``, ``+=``, ``$((a+b))`` integer arithmetic, ``"${ARR[@]}"`` and ``"$@"``
expansion), and the launch command (``python3 -m verl.<module> ...``) is located with the
source offsets of each of its words, so stage 2 can insert text without touching any other byte.
The verl fields are read from its Hydra overrides by :mod:`.verl_config`.

Nothing is ever executed: ``$(...)`` and backticks, ``source``-d files, ``${v%pat}``-style
pattern expansions and assignments made inside ``if``/``for``/``case`` blocks or functions give
:class:`Unknown` values, which the extracted config reports as ``"unknown"`` — never guessed.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from tilake.errors import TilakeError
from tilake.ingest.scan.bash_tree import Command, Token, parse_bash
from tilake.ingest.scan.launch_checks import PASSTHROUGH_RAW, launch_warnings
from tilake.ingest.scan.shell import ASSIGN_PREFIX_RE, KEY_RAW_RE, UNKNOWN, Maybe, Shell, Unknown, Value, plain
from tilake.ingest.scan.verl_config import LaunchCommand, extract_config, profiler_info, profiler_plan

__all__ = ["UNKNOWN", "Unknown", "LaunchCommand", "ParsedScript", "parse_script"]


@dataclass
class ParsedScript:
    """Everything stage 1 learns from the script text.

    Attributes:
        path: resolved script path. text: its content. launch: the launch command.
        variables: final shell variables set by the script (strings; arrays as lists; Unknown
            → ``"unknown"``), excluding the inherited environment unless the script changed them.
        config: the extracted RL config (see :func:`extract_config`), each value a string/int/bool
            or ``"unknown"``. sources: where each config value came from.
        profiler: ``{"present": bool, "evidence": [...], "save_path": str|"unknown", "steps": [int]|
            "unknown", "warnings": [...], "plan": str|None}`` (``plan``: where a script's own profiler
            writes and which step must be reached).
        warnings: things the parser could not follow (sourced files, cd, other launch commands).
        run_warnings: reasons the run will not happen here or its exit status will lie (``ray job
            submit --no-wait``, ``| tee`` without ``pipefail``, ``set -u`` with a variable unset before
            the launch, ``"$@"`` stranded after a missing ``\\``); shown before anything runs.
    """

    path: Path
    text: str
    launch: LaunchCommand
    variables: Dict[str, Any]
    config: Dict[str, Any]
    sources: Dict[str, str]
    profiler: Dict[str, Any]
    warnings: List[str]
    run_warnings: List[str] = field(default_factory=list)
    launch_loops: List[Dict[str, Any]] = field(default_factory=list)

    def run_id(self) -> str:
        """Deterministic run id from the resolved script path and the model id."""
        model = str(self.config.get("model_id", UNKNOWN))
        digest = hashlib.sha256(f"{self.path}\0{model}".encode()).hexdigest()[:10]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model.split("/")[-1]).strip("-.") or "model"
        return f"scan-{slug}-{digest}"


_UNDECODABLE_RE = re.compile("[\udc80-\udcff]+")

#: ``-m verl.<...>``, or a recipe entry point: ``-m recipe.<name>.<module>`` whose last part is
#: ``main``, starts with ``main_`` or ends with ``_main`` (``recipe.dapo.main_dapo``,
#: ``recipe.fully_async_policy.fully_async_main``; ``recipe.dapo.prepare_data`` is not one)
_LAUNCH_MODULE_RE = re.compile(r"^(verl(\.[A-Za-z0-9_]+)+|recipe(\.[A-Za-z0-9_]+)*\.(main|main_[A-Za-z0-9_]+|[A-Za-z0-9_]+_main))$")
LOOKED_FOR = ("`python[3] -m verl.<module>` or a recipe entry point `python[3] -m recipe.<name>.<main_*|*_main>` "
              "(also after `ray job submit ... --` or `torchrun`)")


def parse_script(path: Union[str, Path], env: Optional[Mapping[str, str]] = None,
                 args: Sequence[str] = ()) -> ParsedScript:
    """Parse a verl launch script (no execution).

    Args:
        path: the bash script.
        env: environment the script would run with (default: ``os.environ``); ``${VAR:-x}``
            takes the environment's value when set, like bash.
        args: positional arguments the script would receive (``$@``).
    Returns:
        :class:`ParsedScript`.
    Raises:
        TilakeError: the path does not exist / is not a readable text file / has unbalanced
            quoting / has CRLF line endings (bash would pass no overrides), or no ``python -m verl...``
            launch command is found.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise TilakeError("no such file", path=p)
    if not p.is_file():
        raise TilakeError("not a file (expected an RL launch script)", path=p)
    p = p.resolve()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TilakeError(f"cannot read the script: {exc.strerror}", path=p) from exc
    if b"\0" in data[:8192]:
        raise TilakeError("binary file, not a launch script", path=p)
    undecodable: List[int] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        # bash does not care about the encoding: a GBK/Latin-1 comment must not refuse the script. The bytes are
        # kept (surrogateescape: a rewrite of the script keeps them) and read as U+FFFD by the parser.
        text = data.decode("utf-8", "surrogateescape")
        undecodable = [k + 1 for k, ln in enumerate(text.split("\n")) if _UNDECODABLE_RE.search(ln)]
    crlf = text.count("\r\n")
    if crlf:
        raise TilakeError(f"CRLF (Windows) line endings on {crlf} of {text.count(chr(10))} lines: bash reads `\\` + CR "
                          "as an escaped carriage return, not a line continuation, so the launch command would get "
                          "none of its overrides (and every value would end in a CR)", path=p,
                          hint=f"convert the script to LF line endings: dos2unix {p.name} (or sed -i 's/\\r$//' "
                          f"{p.name}), then scan again")
    env = dict(os.environ if env is None else env)
    bash = parse_bash(text, str(p))
    shell = Shell(env, args, str(p))
    warnings: List[str] = []
    if undecodable:
        lines = ", ".join(map(str, undecodable[:10])) + (" …" if len(undecodable) > 10 else "")
        warnings.append(f"line(s) {lines}: bytes that are not UTF-8 (another encoding, e.g. GBK), read as U+FFFD "
                        "and kept as they are in the file")
    launches: List[Tuple[Command, int, frozenset]] = []
    fn_assigns: Dict[str, set] = {}
    opts: set = set()                       # shell options in force (``u``, ``pipefail``)
    unbound: List[Tuple[int, int, str]] = []  # (offset, line, name) hit while set -u was on
    refs = iter(bash.refs)
    ref = next(refs, None)

    for cmd in bash.commands:
        for lp in cmd.loops:        # a loop variable takes one value per iteration: never one known value
            if lp.variable and not isinstance(shell.vars.get(lp.variable), Unknown):
                shell.vars[lp.variable] = Unknown(f"{lp.variable} is the loop variable of `{lp.header.rstrip('; ')}` "
                                                  f"(line {lp.line}): one value per iteration")
        end = max(t.end for t in cmd.words + cmd.arrays)
        while ref is not None and ref.start < end:
            if ref.certain and "u" in opts and not ref.name.isdigit() and shell.lookup(ref.name) is None:
                unbound.append((ref.start, ref.line, ref.name))
            ref = next(refs, None)
        if cmd.in_function:
            names = fn_assigns.setdefault(cmd.function, set())
            names.update(a.name for a in cmd.arrays)
            names.update(m.group(1) for m in (ASSIGN_PREFIX_RE.match(w.raw) for w in cmd.words) if m)
            idx = _find_launch(cmd, shell) if cmd.words else None
            if idx is not None:
                launches.append((cmd, idx, frozenset(opts)))
            continue
        if cmd.words and cmd.words[0].raw in fn_assigns:
            for name in fn_assigns[cmd.words[0].raw]:
                shell.vars[name] = Unknown(f"{name} may be set by function {cmd.words[0].raw} "
                                           f"(called on line {cmd.line})")
        uncertain = cmd.conditional or cmd.in_function
        where = "a function body" if cmd.in_function else "a conditional block"
        words = [w.raw for w in cmd.words]
        # array assignments (possibly several: A=(..) B=(..))
        if cmd.arrays and not words:
            for arr in cmd.arrays:
                old = shell.vars.get(arr.name)
                if uncertain and arr.append and isinstance(old, list) and not cmd.in_function:
                    keys = [m.group(1) for m in (KEY_RAW_RE.match(e.raw) for e in arr.elements) if m]
                    shell.vars[arr.name] = list(old) + [Maybe(keys, f"{arr.name}+=( ... ) inside {where} "
                                                                     f"(line {cmd.line}) may set it")]
                    continue
                if uncertain:
                    shell.vars[arr.name] = Unknown(f"{arr.name} assigned inside {where} (line {cmd.line})")
                    continue
                elems: List[Value] = []
                for e in arr.elements:
                    elems.extend(shell.expand_word(e.raw))
                old = shell.vars.get(arr.name)
                if arr.append and isinstance(old, list):
                    elems = list(old) + elems
                shell.vars[arr.name] = elems
            continue
        if not words:
            continue
        # locate a launch command before evaluating anything else
        idx = _find_launch(cmd, shell)
        if idx is not None:
            launches.append((cmd, idx, frozenset(opts)))
            continue
        head = words[0]
        assigns = []
        j = 0
        while j < len(words) and ASSIGN_PREFIX_RE.match(words[j]):
            assigns.append(cmd.words[j])
            j += 1
        if j == len(words):
            for t in assigns:
                _assign(shell, t.raw, uncertain, where, cmd.line)
            continue
        head = words[j]
        if head in ("export", "declare", "typeset", "local", "readonly") and not uncertain:
            for t in cmd.words[j + 1:]:
                if t.raw.startswith("-"):
                    continue
                if ASSIGN_PREFIX_RE.match(t.raw):
                    _assign(shell, t.raw, uncertain, where, cmd.line)
                    if head == "export":
                        shell.exported.add(ASSIGN_PREFIX_RE.match(t.raw).group(1))
            for arr in cmd.arrays:
                elems = [f for e in arr.elements for f in shell.expand_word(e.raw)]
                shell.vars[arr.name] = elems
        elif head in ("export", "declare", "typeset", "local", "readonly"):
            for t in cmd.words[j + 1:]:
                m = ASSIGN_PREFIX_RE.match(t.raw)
                if m:
                    shell.vars[m.group(1)] = Unknown(f"{m.group(1)} assigned inside {where} (line {cmd.line})")
        elif head == "unset" and not uncertain:
            for t in cmd.words[j + 1:]:
                if not t.raw.startswith("-"):
                    shell.vars.pop(t.raw, None)
        elif head in ("source", "."):
            warnings.append(f"line {cmd.line}: sources {' '.join(words[j + 1:])}: variables set there "
                            "are not seen by the parser")
        elif head == "cd":
            warnings.append(f"line {cmd.line}: changes directory ({' '.join(words[j + 1:])}): relative "
                            "paths after it are resolved from the script's folder")
        elif head == "shift" and not uncertain:
            shell.args = shell.args[1:]
        elif head == "set" and len(words) > j + 1 and words[j + 1] == "--":
            shell.args = [f if isinstance(f, str) else "" for w in words[j + 2:] for f in shell.expand_word(w)]
        elif head == "set" and not uncertain:
            _set_options(opts, words[j + 1:])

    if not launches:
        raise TilakeError(f"not a verl launch script: no `python -m verl...` command found (looked for {LOOKED_FOR})",
                          path=p, hint="pass the bash script that runs python3 -m verl.trainer.main_ppo")
    unconditional = [lc for lc in launches if not lc[0].conditional and not lc[0].in_function]
    chosen_cmd, idx, launch_opts = (unconditional or launches)[-1]
    for other, _, _ in launches:
        if other is not chosen_cmd:
            warnings.append(f"line {other.line}: another verl launch command; the one on line "
                            f"{chosen_cmd.line} is used")
    launch = _build_launch(chosen_cmd, idx, shell, text)
    launch_end = max(t.end for t in chosen_cmd.words)
    run_warnings = launch_warnings(chosen_cmd, launch, launch_opts, bash.commands,
                                   [(line, name) for at, line, name in unbound if at < launch_end], text)

    variables = {}
    for k, v in shell.vars.items():
        if k in env and env[k] == v:
            continue
        variables[k] = plain(v)
    config, sources = extract_config(launch, shell, p)
    prof = profiler_info(text, launch, shell)
    prof["plan"] = profiler_plan(prof, config)
    loops = []
    for lp in chosen_cmd.loops:
        vals = [plain(f) for v in lp.values for f in shell.expand_word(v)]
        loops.append({"kind": lp.kind, "header": lp.header.rstrip("; \t"), "line": lp.line, "variable": lp.variable,
                      "values": vals})
    return ParsedScript(p, text, launch, variables, config, sources, prof, warnings, run_warnings, loops)


def _set_options(opts: set, words: Sequence[str]) -> None:
    """Apply ``set -euo pipefail`` / ``set +u`` / ``set -o nounset`` to ``opts`` (``u``, ``pipefail``)."""
    k = 0
    while k < len(words):
        w = words[k]
        if w in ("-o", "+o") and k + 1 < len(words):
            name = {"nounset": "u"}.get(words[k + 1], words[k + 1])
            (opts.add if w == "-o" else opts.discard)(name)
            k += 2
            continue
        if re.fullmatch(r"[-+][A-Za-z]+", w):
            letters = w[1:]
            if "u" in letters:
                (opts.add if w[0] == "-" else opts.discard)("u")
            if letters.endswith("o") and k + 1 < len(words):      # -euo pipefail
                name = {"nounset": "u"}.get(words[k + 1], words[k + 1])
                (opts.add if w[0] == "-" else opts.discard)(name)
                k += 1
        k += 1


def _assign(shell: Shell, raw: str, uncertain: bool, where: str, line: int) -> None:
    m = ASSIGN_PREFIX_RE.match(raw)
    name, append = m.group(1), bool(m.group(2))
    if uncertain:
        shell.vars[name] = Unknown(f"{name} assigned inside {where} (line {line})")
        return
    value = shell.expand_string(raw[m.end():])
    if append:
        old = shell.vars.get(name)
        if isinstance(old, list):
            shell.vars[name] = list(old) + [value]
            return
        if isinstance(old, Unknown) or isinstance(value, Unknown):
            value = old if isinstance(old, Unknown) else value
        else:
            value = (old or "") + value
    shell.vars[name] = value


def _find_launch(cmd: Command, shell: Shell) -> Optional[int]:
    """Index of the word holding the verl module name (``-m verl.x``), or None."""
    for k, w in enumerate(cmd.words[:-1]):
        if w.raw == "-m":
            mod = shell.expand_string(cmd.words[k + 1].raw)
            if isinstance(mod, str) and _LAUNCH_MODULE_RE.match(mod):
                return k + 1
    return None


def _build_launch(cmd: Command, idx: int, shell: Shell, text: str) -> LaunchCommand:
    module = shell.expand_string(cmd.words[idx].raw)
    fields: List[Value] = []
    overrides: Dict[str, Value] = {}
    config_name: Optional[str] = None
    passthrough = False
    arg_tokens = cmd.words[idx + 1:]
    last_arg: Optional[Token] = None
    shell.maybe_hits = []
    expect_config_name = expect_config_path = False
    config_path: Optional[str] = None
    for t in arg_tokens:
        if t.raw in PASSTHROUGH_RAW:
            passthrough = True
        else:
            last_arg = t
        for f in shell.expand_word(t.raw):
            fields.append(f)
            if isinstance(f, Unknown):
                if f.key:
                    overrides[f.key] = f
                continue
            if expect_config_name:
                config_name, expect_config_name = f, False
                continue
            if f == "--config-name":
                expect_config_name = True
                continue
            if f.startswith("--config-name="):
                config_name = f.split("=", 1)[1]
                continue
            if expect_config_path:
                config_path, expect_config_path = f, False
                continue
            if f in ("--config-path", "-cp"):
                expect_config_path = True
                continue
            if f.startswith("--config-path="):
                config_path = f.split("=", 1)[1]
                continue
            if f.startswith("-"):
                continue
            m = re.match(r"^[+]{0,2}([A-Za-z0-9_.@/\-]+)=(.*)$", f, re.S)
            if m:
                overrides[m.group(1)] = m.group(2)
    for maybe in shell.maybe_hits:
        for key in maybe.keys:
            overrides[key.lstrip("+")] = Unknown(maybe.reason, key=key.lstrip("+"))
    anchor = last_arg or cmd.words[idx]
    insert_at = anchor.end
    indent = None
    line_start = text.rfind("\n", 0, anchor.start) + 1
    prefix = text[line_start:anchor.start]
    if re.match(r"[ \t]*\\\r?\n", text[insert_at:]) and prefix.strip() == "":
        indent = prefix   # one argument per line: the new argument gets its own line
    prefix_env: Dict[str, Value] = {}
    program = ""
    for t in cmd.words[:idx]:
        m = ASSIGN_PREFIX_RE.match(t.raw)
        if m and not program:
            prefix_env[m.group(1)] = shell.expand_string(t.raw[m.end():])
        elif not program:
            program = t.raw
    return LaunchCommand(module, cmd.line, cmd.words, fields, overrides, config_name, passthrough,
                         insert_at, indent, cmd.conditional, cmd.in_function, config_path=config_path,
                         program=program, env=prefix_env)


