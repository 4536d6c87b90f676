"""The environment a launch script's Python really runs in: its preamble, replayed in a child bash.

A verl launch script often builds its own environment before ``python -m verl...``: it activates a venv
(``source venv/bin/activate``), a conda env (``eval "$(conda shell.bash hook)"; conda activate rl``),
loads modules or exports ``PATH``/``PYTHONPATH``. Checking tilake's own interpreter would say nothing
about that one. :func:`preamble_text` keeps, in order, the commands before the launch command that shape
the environment — plain and array assignments, ``export``/``declare``/``readonly``/``unset``,
``source``/``.``, ``cd``/``pushd``, ``conda``/``mamba``/``micromamba activate``, ``module load``,
``eval "$(conda shell.bash hook)"`` — and nothing else (no ``rm``, ``mkdir``, downloads or background
jobs; commands inside functions are skipped). :func:`probe_script_env` runs that text with
``bash --noprofile --norc -c`` from the script's folder (``$0`` = the script, ``$@`` = its arguments, so
``$(dirname "${BASH_SOURCE[0]}")`` resolves to the script's folder as in the real run) and then
execs the launch command's own interpreter (with its prefix assignments) on a probe program that imports
the modules and reports versions, ``sys.executable`` and the CUDA device count.

The replay runs the script's own code (its ``$(...)`` assignments, sourced files, the interpreter it names), so
it happens only when the user allows it (``tilake scan --allow-preamble``). Without that,
:func:`probe_fixed_env` runs one fixed command: ``python3`` (or the bare ``python``/``python3.X`` the launch
command names) from the user's own ``PATH``, from ``/``, on the probe program; nothing of the script runs.
Commands under a condition (``if``/``case``/loops/``&&``/``||``) or in a function are never replayed, even when
allowed: their condition is not known without running it (:func:`preamble_text` lists them as skipped).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from tilake.ingest.scan.bash_tree import parse_bash
from tilake.ingest.scan.shell import ASSIGN_PREFIX_RE

_KEEP_HEADS = {"export", "declare", "typeset", "readonly", "unset", "source", ".", "cd", "pushd", "popd"}
_ENV_TOOLS = {"conda": ("activate", "deactivate"), "mamba": ("activate", "deactivate"),
              "micromamba": ("activate", "deactivate"), "module": ("load", "add", "use", "purge"),
              "ml": None, "pyenv": ("activate", "shell"), "workon": None, "nvm": ("use",)}

_PROBE = r"""
import json, sys, importlib
out = {"python": sys.executable, "python_version": sys.version.split()[0], "modules": {}, "errors": {}}
from importlib import metadata
for name in sys.argv[1:]:
    try:
        mod = importlib.import_module(name)
        v = getattr(mod, "__version__", None)
        if v is None:
            try:
                v = metadata.version(name)
            except Exception:
                v = "unknown"
        out["modules"][name] = str(v)
    except BaseException as exc:
        out["errors"][name] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
try:
    import torch
    out["cuda_devices"] = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
except BaseException:
    out["cuda_devices"] = None
print("TILAKE_ENV_PROBE " + json.dumps(out), flush=True)
"""


@dataclass
class ScriptEnv:
    """What the script's own interpreter reports.

    Attributes:
        ok: the probe ran and answered. python: ``sys.executable`` there. modules: name → version of each
        module that imported. errors: name → one-line import error. cuda_devices: ``torch.cuda.device_count()``
        (0 without CUDA, None unknown). preamble: the environment-shaping commands (replayed only when
        ``replayed``). command: the interpreter command used. failure: why the probe did not answer (``ok`` False).
        replayed: the script's preamble ran before the probe (``--allow-preamble``); False: the fixed probe only.
        skipped: ``line N: text`` of environment commands not replayed (under a condition).
    """

    ok: bool
    python: Optional[str] = None
    python_version: Optional[str] = None
    modules: Dict[str, str] = field(default_factory=dict)
    errors: Dict[str, str] = field(default_factory=dict)
    cuda_devices: Optional[int] = None
    preamble: str = ""
    command: str = ""
    failure: str = ""
    replayed: bool = False
    skipped: List[str] = field(default_factory=list)


def _keep(words: List[str]) -> bool:
    j = 0
    while j < len(words) and ASSIGN_PREFIX_RE.match(words[j]):
        j += 1
    if j == len(words):
        return True                                   # plain assignments
    head = words[j]
    if head in _KEEP_HEADS:
        return True
    if head in _ENV_TOOLS:
        subs = _ENV_TOOLS[head]
        return subs is None or (len(words) > j + 1 and words[j + 1] in subs)
    if head == "eval" and re.search(r"conda\s+shell\.|micromamba\s+shell|mamba\s+shell|pyenv\s+init", " ".join(words)):
        return True
    return False


def preamble_text(text: str, launch_start: int, path: str = "<script>", skipped: Optional[List[str]] = None) -> str:
    """The environment-shaping commands of ``text`` before offset ``launch_start`` (one per line, in order).

    Only commands bash runs whenever it reaches them are kept: one inside ``if``/``case``/a loop/a subshell, right
    of ``&&``/``||`` or in a function is left out (``if false; then source x; fi`` must not source ``x``); each such
    environment command is appended to ``skipped`` as ``line N: text``.

    Raises:
        TilakeError: the script is not valid bash (as :func:`tilake.ingest.scan.bash_tree.parse_bash`).
    """
    lines: List[str] = []
    for cmd in parse_bash(text, path).commands:
        toks = cmd.words + cmd.arrays
        if not toks or cmd.in_function:
            continue
        start = min(t.start for t in toks)
        end = max(t.end for t in toks)
        if end > launch_start:
            break
        if cmd.words and not _keep([w.raw for w in cmd.words]):
            continue
        if not cmd.words and not cmd.arrays:
            continue
        if cmd.conditional:
            if skipped is not None:
                skipped.append(f"line {cmd.line}: {text[start:end][:120]}")
            continue
        lines.append(text[start:end])
    return "\n".join(lines)


#: a prefix assignment with a literal value (``CUDA_VISIBLE_DEVICES=0``): the fixed probe applies it
_LITERAL_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=([A-Za-z0-9_.,:/+-]*)$")


def probe_fixed_env(interpreter: str, modules: Sequence[str], env: Mapping[str, str],
                    timeout_s: float = 300) -> ScriptEnv:
    """The fixed probe: ``<python> -c <probe> modules`` with nothing of the script run.

    Args:
        interpreter: the launch command's interpreter as written (:func:`interpreter_words`). Only a bare
            ``python``/``python3``/``python3.X`` name is taken (looked up on ``env``'s ``PATH``, the user's own);
            a path, a variable or anything else gives ``python3`` on that ``PATH``. Prefix assignments with
            literal values (``CUDA_VISIBLE_DEVICES=0``) are applied. It runs from ``/`` (no module of the
            script's folder can shadow ``torch``).
        modules / env / timeout_s: as :func:`probe_script_env`.
    Returns:
        :class:`ScriptEnv` with ``replayed`` False (never raises: ``ok`` False and ``failure`` say why).
    """
    words = interpreter.split()
    e = dict(env)
    for w in words[:-1]:
        m = _LITERAL_ASSIGN_RE.match(w)
        if m:
            e[m.group(1)] = m.group(2)
    prog = words[-1] if words and re.fullmatch(r"python[0-9.]*", words[-1]) else "python3"
    exe = shutil.which(prog, path=e.get("PATH", os.defpath))
    res = ScriptEnv(False, command=prog)
    if exe is None:
        res.failure = f"`{prog}` is not on PATH ({e.get('PATH', os.defpath)})"
        return res
    return _run_probe(res, [exe, "-c", _PROBE, *modules], "/", e, timeout_s, exe, prog)


def _run_probe(res: ScriptEnv, argv: List[str], cwd: str, env: Mapping[str, str], timeout_s: float, program: str,
               what: str) -> ScriptEnv:
    """Run one probe command (stdin closed, output captured) and read its answer into ``res``; a timeout or a
    program that cannot start becomes ``res.failure``, never an exception."""
    try:
        cp = subprocess.run(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True,
                            timeout=timeout_s)
    except subprocess.TimeoutExpired:
        res.failure = f"the probe did not answer within {timeout_s:.0f} s"
        return res
    except OSError as exc:
        res.failure = f"cannot run {program}: {exc.strerror or exc}"
        return res
    return _read_probe(res, cp, what)


def probe_script_env(script: Path, text: str, launch_start: int, interpreter: str, modules: Sequence[str],
                     env: Mapping[str, str], args: Sequence[str] = (), timeout_s: float = 300) -> ScriptEnv:
    """Replay the preamble in a child bash, then import ``modules`` with the launch command's interpreter.

    Args:
        script: the launch script (its folder is the working directory, ``$0`` its path).
        text / launch_start: the script text and the offset of the launch command's first word.
        interpreter: the launch command's program with its prefix assignments as written
            (``python``, ``$PYTHON``, ``CUDA_VISIBLE_DEVICES=0 python3``); bash expands it after the preamble.
        modules: modules to import (``torch``, ``verl``, ``vllm``). env: the environment the scan runs it with.
    Returns:
        :class:`ScriptEnv` (never raises for a failing probe: ``ok`` False and ``failure`` say why).
    """
    skipped: List[str] = []
    pre = preamble_text(text, launch_start, str(script), skipped)
    cmd = f"{pre}\nexec {interpreter} -c \"$TILAKE_ENV_PROBE_PROGRAM\" {' '.join(modules)}\n"
    e = dict(env)
    e["TILAKE_ENV_PROBE_PROGRAM"] = _PROBE
    res = ScriptEnv(False, preamble=pre, command=interpreter, replayed=True, skipped=skipped)
    return _run_probe(res, ["bash", "--noprofile", "--norc", "-c", cmd, str(script), *args], str(script.parent), e,
                      timeout_s, "bash", f"`{interpreter}` after the script's preamble")


def _read_probe(res: ScriptEnv, cp: "subprocess.CompletedProcess[str]", what: str) -> ScriptEnv:
    line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("TILAKE_ENV_PROBE ")), None)
    if line is None:
        last = [ln for ln in (cp.stderr or "").splitlines() if ln.strip()]
        res.failure = (f"{what} did not run the probe (exit status {cp.returncode})"
                       + (": " + last[-1][:300] if last else ""))
        return res
    try:
        d = json.loads(line[len("TILAKE_ENV_PROBE "):])
    except ValueError:
        res.failure = f"{what} answered the probe with text that is not JSON"
        return res
    res.ok, res.python, res.python_version = True, d.get("python"), d.get("python_version")
    res.modules, res.errors, res.cuda_devices = d.get("modules", {}), d.get("errors", {}), d.get("cuda_devices")
    return res


def interpreter_words(launch_words: Sequence[str], module_index: int) -> str:
    """The launch command's interpreter as written: prefix assignments plus the program word when it is a
    Python (``python``, ``python3.11``, ``$PYTHON``, ``/opt/venv/bin/python``); ``python3`` otherwise
    (``ray job submit -- python3`` or ``torchrun`` keep their own; the probe uses the shell's ``python3``)."""
    pre, prog = [], None
    for w in launch_words[:max(module_index - 1, 0)]:
        if prog is None and ASSIGN_PREFIX_RE.match(w):
            pre.append(w)
            continue
        if prog is None:
            prog = w
    # the word right before ``-m`` is the interpreter in ``... -- python3 -m verl...`` and ``python -m``
    before_m = launch_words[module_index - 2] if module_index >= 2 else None
    cand = before_m if before_m and re.search(r"(^|/)python[0-9.]*$|^\$\{?[A-Za-z_]*PY", before_m) else None
    if cand is None and prog and re.search(r"(^|/)python[0-9.]*$|^\$\{?[A-Za-z_]*PY", prog):
        cand = prog
    if cand is not prog:
        pre = []
    return " ".join([*pre, cand or "python3"])


def default_modules(infer_backend: str) -> List[str]:
    """``torch``, ``verl`` and the rollout engine (``vllm`` unless the script names ``sglang``)."""
    eng = {"sglang": "sglang", "vllm": "vllm", "hf": None}.get(str(infer_backend), "vllm")
    return ["torch", "verl"] + ([eng] if eng else [])


def script_env_summary(se: ScriptEnv) -> str:
    """One line: interpreter and module versions (for the console and ``runs.tool_versions``)."""
    if not se.ok:
        return se.failure
    mods = ", ".join(f"{k} {v}" for k, v in se.modules.items())
    return f"{se.python} (Python {se.python_version}): {mods or 'no module imported'}"


__all__ = ["ScriptEnv", "preamble_text", "probe_script_env", "probe_fixed_env", "interpreter_words", "default_modules",
           "script_env_summary"]
