"""Stages 1c and 2 of ``tilake scan``: back the script up, then add the profiler block.

Backup: ``<script>.bak_<YYYYmmdd_HHMM>`` beside the script, byte-identical (verified after the
copy; file mode kept). A backup that is already byte-identical to the current script is reused
instead of writing another one.

Injection (seed stage 2.2, verl ``global_profiler`` keys of reference doc §4.1): when the script
has no profiler configuration, insert before the launch command an output folder
(``PROFILER_OUTPUT_DIR``, default ``<script dir>/profiler_output``, cleaned and re-created) and a
``PROFILER=( ... )`` array, then append ``"${PROFILER[@]}"`` to the launch command's arguments
(before a trailing ``"$@"``, so the user's own arguments still win). Every other byte of the
script is kept exactly as it was (quoting, continuations, comments). Running it again changes
nothing: a script that already has a profiler configuration is left alone.
"""
from __future__ import annotations

import difflib
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import List, Optional, Tuple

from tilake.errors import TilakeError
from tilake.ingest.scan.script import ParsedScript

BLOCK_BEGIN = "# >>> tilake scan: profiler block"
BLOCK_END = "# <<< tilake scan <<<"

#: contents collected for every role: npu+cpu kernels, framework shapes, python call stacks
PROFILER_CONTENTS = "['npu','cpu','shapes','stack']"


def profiler_args(save_path_expr: str = "${PROFILER_OUTPUT_DIR}") -> List[str]:
    """The verl overrides of the injected ``PROFILER`` array, as written in the script.

    Training (actor, ref): e2e NPU profiler at level1 (op types collected); rollout: the same plus
    ``tool=npu`` and ``discrete=True`` so vLLM's own torch_npu profiler writes raw ``*_ascend_pt``
    folders under ``agent_loop_rollout_replica_*`` (seed §2.2–2.4).
    """
    c = f'"{PROFILER_CONTENTS}"'
    out = ["global_profiler.tool=npu", '"global_profiler.steps=[1]"',
           f'global_profiler.save_path="{save_path_expr}"']
    for role in ("actor", "ref"):
        out += [f"actor_rollout_ref.{role}.profiler.enable=True",
                f"actor_rollout_ref.{role}.profiler.tool_config.npu.contents={c}",
                f"actor_rollout_ref.{role}.profiler.tool_config.npu.level=level1"]
    out += ["actor_rollout_ref.rollout.profiler.enable=True",
            "actor_rollout_ref.rollout.profiler.tool=npu",
            f"actor_rollout_ref.rollout.profiler.tool_config.npu.contents={c}",
            "actor_rollout_ref.rollout.profiler.tool_config.npu.level=level1",
            "actor_rollout_ref.rollout.profiler.tool_config.npu.discrete=True"]
    return out


#: the rollout's torch tool config: discrete mode is what makes verl's vLLM server drive the engine profiler
#: (verl 0.9 ``vllm_async_server.py`` ``_should_profile``); ``++`` adds or replaces the node
TORCH_ROLLOUT_TOOL = ("{_target_: verl.utils.profiler.config.TorchProfilerToolConfig, contents: [], discrete: true}")


def torch_profiler_args(save_path_expr: str = "${PROFILER_OUTPUT_DIR}") -> List[str]:
    """The verl overrides of the injected ``PROFILER`` array for ``--profiler torch`` (verl >= 0.9
    ``global_profiler.tool=torch``), as written in the script.

    Training (actor, ref): ``profiler.enable=True`` and ``all_ranks=True`` — one trace per worker and RL step
    (``<save_path>/<role>_<scope>_step<N>_rank<r>-of-<ws>_pid<pid>_<ts>.json.gz``); rollout: the torch tool
    config with ``discrete: true`` (vLLM's own torch profiler writes
    ``<save_path>/agent_loop_rollout_replica_<r>/*.pt.trace.json.gz``). Every key is accepted by verl 0.9.1's
    ``ppo_trainer`` config (checked with Hydra's compose and by ``e2e/verl_cpu.sh`` on a real run).
    """
    out = ["global_profiler.tool=torch", '"global_profiler.steps=[1]"',
           f'global_profiler.save_path="{save_path_expr}"']
    for role in ("actor", "ref"):
        out += [f"actor_rollout_ref.{role}.profiler.enable=True", f"actor_rollout_ref.{role}.profiler.all_ranks=True"]
    out += [f'"++actor_rollout_ref.rollout.profiler.tool_config.torch={TORCH_ROLLOUT_TOOL}"']
    return out


#: what bash passes for the torch block (after quote removal)
EXPECTED_TORCH_VALUES = {
    "global_profiler.tool": "torch",
    "global_profiler.steps": "[1]",
    "actor_rollout_ref.actor.profiler.enable": "True",
    "actor_rollout_ref.actor.profiler.all_ranks": "True",
    "actor_rollout_ref.ref.profiler.enable": "True",
    "actor_rollout_ref.ref.profiler.all_ranks": "True",
    "actor_rollout_ref.rollout.profiler.tool_config.torch": TORCH_ROLLOUT_TOOL,
}


#: the values the stand-in RL script and the tests expect to receive (after bash quote removal)
EXPECTED_PROFILER_VALUES = {
    "global_profiler.tool": "npu",
    "global_profiler.steps": "[1]",
    "actor_rollout_ref.actor.profiler.enable": "True",
    "actor_rollout_ref.actor.profiler.tool_config.npu.contents": PROFILER_CONTENTS,
    "actor_rollout_ref.actor.profiler.tool_config.npu.level": "level1",
    "actor_rollout_ref.ref.profiler.enable": "True",
    "actor_rollout_ref.ref.profiler.tool_config.npu.contents": PROFILER_CONTENTS,
    "actor_rollout_ref.ref.profiler.tool_config.npu.level": "level1",
    "actor_rollout_ref.rollout.profiler.enable": "True",
    "actor_rollout_ref.rollout.profiler.tool": "npu",
    "actor_rollout_ref.rollout.profiler.tool_config.npu.contents": PROFILER_CONTENTS,
    "actor_rollout_ref.rollout.profiler.tool_config.npu.level": "level1",
    "actor_rollout_ref.rollout.profiler.tool_config.npu.discrete": "True",
}


def _dq(text: str) -> str:
    """``text`` escaped for a bash double-quoted string."""
    return "".join("\\" + ch if ch in '"$`\\' else ch for ch in text)


# ------------------------------------------------------------------------------ checks
def fs_read_only(path: Path) -> bool:
    """True when ``path``'s filesystem is mounted read-only (``statvfs`` ``ST_RDONLY``)."""
    try:
        return bool(os.statvfs(path).f_flag & getattr(os, "ST_RDONLY", 1))
    except OSError:
        return False


def check_writable(script: Path) -> None:
    """Refuse a script that is read-only (no write bit, or not writable) or on a read-only FS.

    Raises:
        TilakeError: naming the script and how to fix it. Nothing is written.
    """
    if fs_read_only(script.parent):
        raise TilakeError("the script is on a read-only filesystem: cannot back it up, add the "
                          "profiler block or write profiler_output/ beside it", path=script,
                          hint="copy the script and its folder to a writable place and scan the copy")
    mode = script.stat().st_mode
    if not (mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) or not os.access(script, os.W_OK):
        raise TilakeError("the script is read-only: stopping before any change or run", path=script,
                          hint=f"make it writable (chmod u+w {script.name}) or scan a copy")
    if not os.access(script.parent, os.W_OK | os.X_OK):
        raise TilakeError("the script's folder is not writable (backup and profiler_output go there)",
                          path=script.parent)


# ------------------------------------------------------------------------------ backup
def backup_script(script: Path, now: Optional[datetime] = None) -> Tuple[Path, bool]:
    """Back up ``script`` byte-identically as ``<script>.bak_<YYYYmmdd_HHMM>``.

    Returns:
        ``(backup path, created)``; ``created`` is False when an existing byte-identical backup
        was reused (a name collision with different content gets ``_2``, ``_3``... appended).
    Raises:
        TilakeError: the backup cannot be written or does not read back identical.
    """
    data = script.read_bytes()
    for old in sorted(script.parent.glob(script.name + ".bak_*")):
        try:
            if old.is_file() and old.read_bytes() == data:
                return old, False
        except OSError:
            continue
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M")
    target = script.with_name(f"{script.name}.bak_{stamp}")
    k = 2
    while target.exists():
        target = script.with_name(f"{script.name}.bak_{stamp}_{k}")
        k += 1
    tmp = script.with_name(f".{script.name}.tilake-{uuid.uuid4().hex}")
    try:
        shutil.copy2(script, tmp)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TilakeError(f"cannot write the backup {target.name}: {exc.strerror}", path=script,
                          hint="the script's folder must be writable") from exc
    if target.read_bytes() != data:  # pragma: no cover - would mean a broken filesystem
        raise TilakeError(f"backup {target.name} does not match the script byte for byte", path=script)
    return target, True


# ------------------------------------------------------------------------------ injection
@dataclass
class InjectionPlan:
    """What stage 2 will do (or did).

    Attributes:
        changed: True when the script gets a profiler block. reason: why (not).
        new_text: the script text after injection (== original when not changed).
        output_dir_expr: the ``PROFILER_OUTPUT_DIR`` default written into the block.
        block: the inserted block text ("" when not changed).
        refused: why the scan must not run this script as it is (the launch inside a loop), else "".
        arg: the text appended to the launch command's arguments ("" when not changed).
    """

    changed: bool
    reason: str
    new_text: str
    output_dir_expr: str
    block: str
    refused: str = ""
    arg: str = ""


def plan_injection(parsed: ParsedScript, stamp: Optional[str] = None,
                   backup_name: Optional[str] = None, tool: str = "npu") -> InjectionPlan:
    """Compute the injected script text without writing anything.

    Args:
        parsed: the parsed script (its ``text`` and launch-command offsets are used).
        stamp: time stamp written in the marker comment. backup_name: shown in the marker.
        tool: ``npu`` (torch_npu profiler, :func:`profiler_args`) or ``torch`` (PyTorch profiler,
            :func:`torch_profiler_args`).
    """
    text = parsed.text
    default_dir = str(parsed.path.parent / "profiler_output")
    if BLOCK_BEGIN in text:
        return InjectionPlan(False, "the script already holds a tilake profiler block", text, default_dir, "")
    loops = getattr(parsed, "launch_loops", None) or []
    if loops:
        lp = loops[0]
        vals = ", ".join(map(str, lp["values"])) or "not readable here"
        why = (f"the launch command runs inside `{lp['header']}` (line {lp['line']}; values: {vals}): every iteration is "
               "a separate RL run into one profiler folder, and a block inside the loop would delete the previous "
               "iteration's capture; tilake scans one RL run — take the launch out of the loop (or give the loop one "
               "value) and scan again")
        return InjectionPlan(False, why, text, default_dir, "", refused=why)
    if parsed.profiler["present"] and not parsed.profiler.get("off"):
        return InjectionPlan(False, "the script already has a profiler configuration ("
                             + "; ".join(parsed.profiler["evidence"]) + ")", text, default_dir, "")
    nl, line_start, indent = _anchor(parsed)
    launch = parsed.launch
    note = f" (added {stamp or datetime.now().strftime('%Y-%m-%d %H:%M')}"
    note += f"; original kept as {backup_name})" if backup_name else ")"
    lines = [
        f"{BLOCK_BEGIN}{note} >>>",
        f'PROFILER_OUTPUT_DIR=${{PROFILER_OUTPUT_DIR:-"{_dq(default_dir)}"}}',
        'rm -rf "${PROFILER_OUTPUT_DIR}" 2>/dev/null || true',
        'mkdir -p "${PROFILER_OUTPUT_DIR}"',
        ("# training path: e2e profiler (DB); inference path: discrete=True -> raw *_ascend_pt, analyse() later"
         if tool != "torch" else
         "# PyTorch profiler: one trace per training worker and step; rollout: discrete=true -> vLLM's own traces"),
        "PROFILER=(",
        *[f"    {a}" for a in (torch_profiler_args() if tool == "torch" else profiler_args())],
        ")",
        BLOCK_END,
    ]
    block = "".join(f"{indent}{ln}{nl}" if ln else nl for ln in lines)
    arg = _array_arg(parsed, "PROFILER", nl)
    at = launch.insert_at
    new_text = text[:line_start] + block + text[line_start:at] + arg + text[at:]
    why = ("the script's own profiler block is off (global_profiler.steps=null): tilake's block is inserted before "
           f"line {launch.line} and passed after it, so its keys win" if parsed.profiler.get("off") else
           f"no profiler configuration found: block inserted before line {launch.line}")
    return InjectionPlan(True, why, new_text, default_dir, block, arg=arg)


def _anchor(parsed: ParsedScript) -> Tuple[str, int, str]:
    """``(newline, offset of the launch command's line, its indent)``: where a block goes."""
    text = parsed.text
    nl = "\r\n" if "\r\n" in text else "\n"
    first = parsed.launch.words[0]
    line_start = text.rfind("\n", 0, first.start) + 1
    indent = text[line_start:first.start]
    return nl, line_start, (indent if indent.strip() == "" else "")


def _array_arg(parsed: ParsedScript, name: str, nl: str) -> str:
    """The text appended to the launch command's arguments for ``"${NAME[@]}"`` (its own line when the command
    has one argument per line)."""
    ind = parsed.launch.insert_indent
    return f" \\{nl}{ind}\"${{{name}[@]}}\"" if ind is not None else f' "${{{name}[@]}}"'


# ------------------------------------------------------------------------------ dump block (tilake scan --dump)
DUMP_BEGIN = "# >>> tilake scan: dump block"

#: the verl stage whose forward verl's precision tool dumps on the training side (verl >= 0.9
#: ``precision_debugger_profile.py`` ``_STAGE_TO_ROLE``): the actor's log-prob forward of the rollout's tokens
DUMP_STAGE = "actor_compute_log_prob"

#: the seed of the collection runs (vLLM's sampling of the one response token; the prompt is the dataset's first)
DUMP_SEED = 42


def dump_args(dir_expr: str = "${TILAKE_DUMP_DIR}") -> List[str]:
    """The verl overrides of the injected ``TILAKE_DUMP`` array (as written in the script), passed after
    ``PROFILER`` so its keys win.

    Training prefill: verl's own precision tool (verl 0.9.1 ``global_profiler.tool=precision_debugger``; its
    ``PrecisionDebuggerProfiler`` writes ``{save_path}/step_{N}/{stage}/`` and msprobe ``step0/rank{r}/`` under it),
    on stage :data:`DUMP_STAGE` only, with an msprobe ``config.json`` tilake writes (``msprobe_train.json``:
    task tensor, level mix; on a stub round the one ``tilake dumps stub-prepare`` wrote, with ``load``);
    ``strict=True`` so a missing msprobe stops the run instead of dumping nothing. The same request on both sides:
    one prompt (``data.train_batch_size=1``, no shuffle: the dataset's first), ``rollout.n=1``, response length 1
    (the rollout runs the prefill and samples one token; the actor's log-prob forward holds the prompt + that
    token), fixed seeds, no validation before training (its generation would be the first prefill), one step.
    Every key is in verl 0.9.1's ``ppo_trainer`` config.
    """
    d = dir_expr
    return ["global_profiler.tool=precision_debugger", '"global_profiler.steps=[1]"',
            f'global_profiler.save_path="{d}/train"',
            f'global_profiler.global_tool_config.precision_debugger.config_path="{d}/msprobe_train.json"',
            f'"global_profiler.global_tool_config.precision_debugger.stages=[{DUMP_STAGE}]"',
            "global_profiler.global_tool_config.precision_debugger.strict=True",
            "actor_rollout_ref.actor.profiler.enable=True",
            "data.train_batch_size=1", "data.max_response_length=1", "data.shuffle=False", f"data.seed={DUMP_SEED}",
            "actor_rollout_ref.rollout.n=1", f"actor_rollout_ref.rollout.seed={DUMP_SEED}",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            "trainer.total_training_steps=1", "trainer.val_before_train=False"]


#: what bash passes for the dump block when ``TILAKE_DUMP_DIR`` is set (after quote removal; ``{d}`` = the folder)
EXPECTED_DUMP_VALUES = {
    "global_profiler.tool": "precision_debugger",
    "global_profiler.steps": "[1]",
    "global_profiler.save_path": "{d}/train",
    "global_profiler.global_tool_config.precision_debugger.config_path": "{d}/msprobe_train.json",
    "global_profiler.global_tool_config.precision_debugger.stages": f"[{DUMP_STAGE}]",
    "global_profiler.global_tool_config.precision_debugger.strict": "True",
    "actor_rollout_ref.actor.profiler.enable": "True",
    "data.train_batch_size": "1", "data.max_response_length": "1", "data.shuffle": "False",
    "data.seed": str(DUMP_SEED), "actor_rollout_ref.rollout.n": "1", "actor_rollout_ref.rollout.seed": str(DUMP_SEED),
    "actor_rollout_ref.actor.ppo_mini_batch_size": "1", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "1",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "1",
    "trainer.total_training_steps": "1", "trainer.val_before_train": "False",
}


def plan_dump_injection(parsed: ParsedScript, base: InjectionPlan, stamp: Optional[str] = None,
                        backup_name: Optional[str] = None) -> InjectionPlan:
    """Add the dump block (``tilake scan --dump``) to ``base`` (the profiler plan of the same ``parsed`` script).

    The block goes before the launch command (after the profiler block) and ``"${TILAKE_DUMP[@]}"`` after
    ``"${PROFILER[@]}"`` (before a trailing ``"$@"``). It is inert unless ``TILAKE_DUMP_DIR`` is set: the scan
    sets it (and a scratch ``PROFILER_OUTPUT_DIR``) for its collection runs only, so the profiled run and any run
    of the script by hand are the profiler-only script. When set, the block puts ``$TILAKE_DUMP_DIR/hook`` (the
    rollout hook, :mod:`tilake.ingest.scan.tilake_dump_hook`, with its ``vllm.general_plugins`` entry point) on
    ``PYTHONPATH``, exports the hook's dump folder and msprobe config, and passes :func:`dump_args`. Idempotent:
    a script that holds the block is left as ``base`` has it.

    Returns:
        an :class:`InjectionPlan` whose ``new_text`` holds both blocks (``block``: both, ``changed`` when either
        was added); ``base`` unchanged when it was refused.
    """
    if base.refused or DUMP_BEGIN in parsed.text:
        return base
    text = parsed.text
    nl, line_start, indent = _anchor(parsed)
    note = f" (added {stamp or datetime.now().strftime('%Y-%m-%d %H:%M')}"
    note += f"; original kept as {backup_name})" if backup_name else ")"
    lines = [
        f"{DUMP_BEGIN}{note} >>>",
        "# msprobe dumps of one request's prefill on both sides; inert unless TILAKE_DUMP_DIR is set (tilake scan",
        "# --dump sets it for its collection runs): training via verl's precision_debugger, rollout via tilake's hook",
        "TILAKE_DUMP=()",
        'if [ -n "${TILAKE_DUMP_DIR:-}" ]; then',
        '    export PYTHONPATH="${TILAKE_DUMP_DIR}/hook${PYTHONPATH:+:${PYTHONPATH}}"',
        '    export TILAKE_ROLLOUT_DUMP_DIR="${TILAKE_DUMP_DIR}/infer"',
        '    export TILAKE_ROLLOUT_MSPROBE_CONFIG="${TILAKE_DUMP_DIR}/msprobe_infer.json"',
        "    TILAKE_DUMP=(",
        *[f"        {a}" for a in dump_args()],
        "    )",
        "fi",
        BLOCK_END,
    ]
    block = "".join(f"{indent}{ln}{nl}" for ln in lines)
    arg = _array_arg(parsed, "TILAKE_DUMP", nl)
    at = parsed.launch.insert_at
    new_text = text[:line_start] + base.block + block + text[line_start:at] + base.arg + arg + text[at:]
    why = (base.reason + "; " if base.changed else "") + f"dump block inserted before line {parsed.launch.line}"
    return InjectionPlan(True, why, new_text, base.output_dir_expr, base.block + block, arg=base.arg + arg)


def write_script(script: Path, new_text: str) -> None:
    """Replace the script's content atomically (temp file + rename), keeping its mode.

    Raises:
        TilakeError: the folder or script cannot be written.
    """
    tmp = script.with_name(f".{script.name}.tilake-{uuid.uuid4().hex}")
    try:
        tmp.write_bytes(new_text.encode("utf-8", "surrogateescape"))   # bytes that were not UTF-8 kept as read
        shutil.copymode(script, tmp)
        os.replace(tmp, script)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TilakeError(f"cannot write the script: {exc.strerror}", path=script) from exc


def unified_diff(old_text: str, new_text: str, old_name: str, new_name: str) -> str:
    """Unified diff (3 lines of context) between two script texts.

    A last line without a newline is marked ``\\ No newline at end of file`` (the GNU diff
    convention ``patch`` reads), so the diff of a script that ends without one stays applicable
    and every diff line ends with a newline.
    """
    out = []
    for line in difflib.unified_diff(old_text.splitlines(keepends=True), new_text.splitlines(keepends=True),
                                     fromfile=old_name, tofile=new_name):
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)
