"""``tilake scan``: from a verl RL launch script to the finished operator-diff report.

Stages (seed ``operator-diff-scanner``):

1. parse the script (:mod:`tilake.ingest.scan.script`), check the environment through the NPU
   seam (:mod:`tilake.ingest.scan.env`, :mod:`tilake.ingest.scan.seam`), back the script up
   (:mod:`tilake.ingest.scan.inject`);
2. add the profiler block when there is none (idempotent, diff shown);
3. run the whole script once with live progress (:mod:`tilake.ingest.scan.run`), then verify the
   captures, ``analyse()`` raw inference folders and apply the fallback chain
   (:mod:`tilake.ingest.scan.collect`);
4–5. the foundation pipeline (:func:`tilake.pipeline.profile.run_profile`: ingest → dbt build → report).

:func:`scan_from_output` runs stages 4–5 on recorded output (no NPU needed). The run id is
derived from the resolved script path and the model id unless given, so scanning the same
script again replaces that run's partitions in the lake. Console tables and the fallback-3 report
are drawn by :mod:`tilake.reports.scan_console` from the views of :mod:`tilake.pipeline.scan_print`.
"""
from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence

from tilake.errors import TilakeError
from tilake.ingest.run_facts import read_rl_metrics, settings_from_env, settings_from_script
from tilake.ingest.scan import seam as npu_seam
from tilake.ingest.scan.bash_tree import mask_undecodable
from tilake.ingest.scan.collect import STAGE3_FILE, Stage3, collect, collect_torch, write_stage3
from tilake.ingest.scan.env import (
    NO_NPU_MESSAGE,
    Check,
    check_environment,
    check_environment_torch,
    failed,
    tool_versions,
)
from tilake.ingest.scan.inject import (
    BLOCK_BEGIN,
    backup_script,
    check_writable,
    fs_read_only,
    plan_dump_injection,
    plan_injection,
    unified_diff,
    write_script,
)
from tilake.ingest.scan.preamble import (
    default_modules,
    interpreter_words,
    preamble_text,
    probe_fixed_env,
    probe_script_env,
)
from tilake.ingest.scan.run import RunResult, expected_wait, run_script
from tilake.ingest.scan.script import UNKNOWN, ParsedScript, parse_script
from tilake.ingest.scan.seam import NpuProbe, NpuSeam
from tilake.lake.registry import model_family_for
from tilake.lake.store import Lake, validate_run_id
from tilake.pipeline.scan_dump import msprobe_fix, scan_dump_phase
from tilake.pipeline.scan_print import config_view, result_json, stage3_view, write_skipped_report
from tilake.pipeline.script_facts import script_settings
from tilake.reports.json_out import emit_json
from tilake.reports.scan_console import ScanConsole, escape
from tilake.vocab import Evidence, ExitCode

#: the console's words for a side's evidence (``ProfileResult.evidence`` values)
EVIDENCE_WORDS = {Evidence.DEVICE: "device kernels", Evidence.CPU_OPS: "CPU ops (cpu_op: no device kernels on a CPU)",
                  Evidence.HOST_FALLBACK: "host-side fallback, not device",
                  Evidence.MISSING: str(Evidence.MISSING)}


class ScanStopped(TilakeError):
    """The scan stopped at a stage (environment, run failure); the message says where and why."""


@dataclass
class ScanResult:
    """Outcome of a scan.

    Attributes:
        run_id: lake run id. status: ``ok`` | ``host_fallback`` | ``evidence_missing`` |
            ``comparison_skipped`` | ``dry_run``. report_path / csv_path: outputs (None when not
            written). grade_counts: comparison rows per grade. stage3: the stage-3 record.
    """

    run_id: str
    status: str
    parsed: Optional[ParsedScript] = None
    checks: List[Check] = field(default_factory=list)
    backup: Optional[Path] = None
    diff: str = ""
    output_dir: Optional[Path] = None
    run: Optional[RunResult] = None
    stage3: Optional[Stage3] = None
    report_path: Optional[Path] = None
    csv_path: Optional[Path] = None
    grade_counts: Dict[str, int] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    dump: Any = None   # --dump: the rounds and their final analysis (tilake.pipeline.scan_dump.DumpRounds)

    def to_json(self) -> Dict[str, Any]:   # the `tilake scan --format json` document (result_json)
        return result_json(self)


# ------------------------------------------------------------------------------ helpers
def model_family(config: Dict[str, Any], script_dir: Path) -> tuple:
    """``(family, source)`` of the scanned model (:func:`tilake.lake.registry.model_family_for`);
    a relative model path is resolved from the script's folder."""
    mp = config.get("model_path", UNKNOWN)
    path = None
    if mp != UNKNOWN:
        p = Path(str(mp)).expanduser()
        path = p if p.is_absolute() else script_dir / p
    return model_family_for(path, str(config.get("model_id", UNKNOWN)))


def run_meta(parsed: Optional[ParsedScript], probe: Optional[NpuProbe], stage3: Optional[Stage3],
             collection: str, tags: Dict[str, Any]) -> Dict[str, Any]:
    """Values for the lake's ``runs`` row (keys as in ``ingest/schema.py``)."""
    meta: Dict[str, Any] = {"collection_method": collection, "tags": tags, "host": socket.gethostname()}
    rl: Dict[str, Any] = {}
    if parsed is not None:
        c = parsed.config
        fam, fam_src = model_family(c, parsed.path.parent)
        meta.update(model_id=c["model_id"], model_family=fam, script_path=str(parsed.path),
                    train_backend=c["train_backend"], infer_backend=c["infer_backend"],
                    step=_profiled_step(c),
                    parallel_config={"tp": c["train_tp"], "pp": c["train_pp"], "ep": c["train_ep"],
                                     "cp": c["train_cp"], "infer_tp": c["infer_tp"]})
        rl = {k: v for k, v in c.items() if k != "hydra_overrides"}
        rl["_hydra_overrides"] = c["hydra_overrides"]
        rl["_sources"] = dict(parsed.sources, model_family=fam_src)
        rl["_profiler"] = parsed.profiler
        meta["settings"] = {**settings_from_script(parsed), **script_settings(parsed)}
    if probe is not None:
        meta["tool_versions"] = tool_versions(probe)
    if stage3 is not None:
        rl["stage3"] = stage3.to_json()
        meta["stage3"] = rl["stage3"]
    meta["rl_config"] = rl
    return meta


def _profiled_step(config: Dict[str, Any]) -> Optional[int]:
    """First step in ``global_profiler.steps`` (``[1]`` when tilake injected the block), else None."""
    m = re.search(r"\d+", str(config.get("hydra_overrides", {}).get("global_profiler.steps", "")))
    return int(m.group(0)) if m else None


def _guard_output_dir(out: Path, script: Path) -> None:
    """The profiler block ``rm -rf``s its output folder: refuse folders that must never go."""
    out = out.resolve()
    home = Path.home().resolve()
    bad = {Path("/"), home, script.parent.resolve()}
    if out in bad or out in script.parent.resolve().parents or len(out.parts) < 3:
        raise ScanStopped(f"refusing to use {out} as the profiler output folder: the profiler block deletes "
                          "and re-creates it", path=script,
                          hint="set PROFILER_OUTPUT_DIR to a dedicated folder such as <script dir>/profiler_output")


def _output_dir(parsed: ParsedScript, changed: bool, env: Mapping[str, str]) -> Path:
    if changed:
        return Path(env.get("PROFILER_OUTPUT_DIR") or parsed.path.parent / "profiler_output")
    sp = parsed.profiler.get("save_path", UNKNOWN)
    m = re.search(r'^[ \t]*PROFILER_OUTPUT_DIR=\$\{PROFILER_OUTPUT_DIR:-"((?:[^"\\]|\\.)*)"\}', parsed.text, re.M)
    if sp == UNKNOWN and BLOCK_BEGIN in parsed.text and m:
        # our own block (e.g. inside an if-block, where the parser cannot follow it): same semantics
        return Path(env.get("PROFILER_OUTPUT_DIR") or re.sub(r"\\(.)", r"\1", m.group(1)))
    if sp == UNKNOWN:
        raise ScanStopped("the script's existing profiler configuration gives no readable "
                          "global_profiler.save_path, so its output cannot be found", path=parsed.path,
                          hint="set global_profiler.save_path to a literal folder (or remove the profiler "
                          "block and let tilake add one)")
    p = Path(str(sp)).expanduser()
    return p if p.is_absolute() else parsed.path.parent / p


# ------------------------------------------------------------------------------ scan
def scan(script: Path, lake: Lake, *, run_id: Optional[str] = None, out_dir: Optional[Path] = None,
         lang: str = "zh", script_args: Sequence[str] = (), env: Optional[Mapping[str, str]] = None,
         seam: Optional[NpuSeam] = None, console: Any = None, timeout_s: Optional[float] = None,
         dry_run: bool = False, progress: bool = True, profiler: str = "npu",
         rl_step: Optional[int] = None, ray: Optional[str] = None, dump: bool = False,
         max_rounds: int = 3, allow_preamble: bool = False) -> ScanResult:
    """Run all five stages on ``script``.

    ``profiler="torch"`` (verl ``global_profiler.tool=torch``, a GPU or CPU host): the environment is checked by a
    fixed probe (``python3 -c 'import torch, verl, …'`` from the user's PATH; nothing of the script runs) or, with
    ``allow_preamble``, by the script's own interpreter after its preamble (:mod:`tilake.ingest.scan.preamble`:
    torch, verl and the rollout engine import, the model's ``config.json``), the torch profiler block is injected
    (:func:`tilake.ingest.scan.inject.torch_profiler_args`), and stage 3 finds both sides' Chrome traces in
    verl's layouts (:func:`tilake.ingest.scan.collect.collect_torch`); no torch_npu, msprof or ``analyse()``.
    The run log is kept at ``<profiler output>/run.log``.

    Args:
        script: the verl launch script. lake: target lake. run_id: default derived from script + model.
        out_dir: report folder (default: current directory). script_args: the script's ``$@``.
        env: environment for the run (default ``os.environ``). seam: NPU seam (default the real one).
        timeout_s: kill the RL run after this long. dry_run: stages 1–2 only, nothing written.
        profiler: ``npu`` (torch_npu, default) or ``torch``. rl_step: with several profiled RL steps, the one
            to ingest. ray: ingest on Ray (:func:`tilake.pipeline.profile.captures_for`).
        dump / max_rounds: also the dump block and, after the profiled run, the collection rounds of
            :func:`tilake.pipeline.scan_dump.scan_dump_phase` (at most ``max_rounds`` stub rounds).
        allow_preamble: ``--profiler torch``: replay the script's preamble (its unconditional ``source``/``conda
            activate``/assignment lines, ``$(...)`` included) before the probe; default: the fixed probe only.
        console: a :class:`~tilake.reports.scan_console.ScanConsole` or a rich ``Console`` (default: stdout).
    Returns:
        :class:`ScanResult`.
    Raises:
        TilakeError / ScanStopped: bad script, failed environment check (each failed check is printed
            with its fix first), read-only script, failed or killed run (log tail printed, output
            kept, lake unchanged), pipeline errors.
    """
    console = ScanConsole.wrap(console)
    env = dict(os.environ if env is None else env)
    seam = seam or npu_seam.get_seam()
    out_dir = Path(out_dir or ".")

    # ---- stage 1: parse, check, back up
    if dump:   # the dump analysis reads .pt tensors: a missing torch is one error line, before anything
        import torch  # noqa: F401
    parsed = parse_script(script, env=env, args=script_args)
    rid = validate_run_id(run_id or parsed.run_id())
    res = ScanResult(rid, "dry_run" if dry_run else "running", parsed)
    console.config(config_view(parsed))
    if profiler not in ("npu", "torch"):
        raise TilakeError(f"--profiler must be npu or torch, not {profiler!r}")
    if profiler == "torch":
        probe = _torch_probe(parsed, env, script_args, res, console, dump, allow_preamble)
    else:
        program = parsed.launch.program
        python = npu_seam.resolve_python(program, env) if program.startswith("python") else None
        probe_env = dict(env)
        vis = parsed.config.get("visible_devices", UNKNOWN)
        if isinstance(vis, str) and vis != UNKNOWN:
            probe_env["ASCEND_RT_VISIBLE_DEVICES"] = vis      # the script sets it for the launch command
        probe = seam.probe(probe_env, python)
        res.checks = check_environment(parsed, probe, env)
    console.checks(res.checks)
    bad = failed(res.checks)
    if not probe.real:
        console.say(f"[bold yellow]NPU seam: {probe.seam} — not torch_npu, no NPU data is produced[/]")
    if bad and not dry_run:
        head = ("environment check failed (the script's own interpreter)" if profiler == "torch"
                else NO_NPU_MESSAGE if probe.torch_npu is None else "environment check failed")
        items = ", ".join(c.name for c in bad)
        raise ScanStopped(f"stage 1 stopped: {head}; {len(bad)} failed check(s), each listed above with its fix: "
                          f"{items}; nothing was written", path=parsed.path)

    # ---- stage 2 plan (needed for the output folder)
    stamp = datetime.now()
    bak = f"{parsed.path.name}.bak_{stamp.strftime('%Y%m%d_%H%M')}"
    plan = plan_injection(parsed, stamp=stamp.strftime("%Y-%m-%d %H:%M"), backup_name=bak, tool=profiler)
    plan = plan_dump_injection(parsed, plan, stamp=stamp.strftime("%Y-%m-%d %H:%M"), backup_name=bak) if dump else plan
    if plan.refused:
        if not dry_run:
            raise ScanStopped(f"stage 2 stopped: {plan.refused}; nothing was written", path=parsed.path)
        console.panel(plan.refused, "stage 2 · the scan would stop here (dry run)", border_style="red")
        res.warnings.append(plan.refused)
        return res
    output_dir = _output_dir(parsed, plan.changed, env)
    res.output_dir = output_dir
    _guard_output_dir(output_dir, parsed.path)
    if dry_run:
        res.diff = mask_undecodable(unified_diff(parsed.text, plan.new_text, parsed.path.name,
                                                 parsed.path.name + " (planned)"))
        console.panel(plan.reason, "stage 2 · profiler block (dry run: nothing written)")
        if res.diff:
            console.diff(res.diff)
        if bad:
            console.say(f"[red]{len(bad)} environment check(s) fail: the real scan would stop at stage 1[/]")
        return res

    if fs_read_only(parsed.path.parent):
        check_writable(parsed.path)          # raises with the read-only-filesystem message
    backup, created = backup_script(parsed.path, stamp)
    res.backup = backup
    console.say(f"stage 1 · backup: {escape(backup)}" + ("" if created else " (identical backup reused)"))
    check_writable(parsed.path)

    # ---- stage 2: inject
    if plan.changed:
        plan = plan_injection(parsed, stamp=stamp.strftime("%Y-%m-%d %H:%M"), backup_name=backup.name, tool=profiler)
        plan = plan_dump_injection(parsed, plan, stamp.strftime("%Y-%m-%d %H:%M"), backup.name) if dump else plan
        res.diff = mask_undecodable(unified_diff(backup.read_text(encoding="utf-8", errors="surrogateescape"),
                                                 plan.new_text, backup.name, parsed.path.name))
        write_script(parsed.path, plan.new_text)
        check = parse_script(parsed.path, env=env, args=script_args)
        arrays = ["PROFILER["] + (["TILAKE_DUMP["] if dump else [])
        if not check.profiler["present"] or not all(any(a in w.raw for w in check.launch.words) for a in arrays):
            write_script(parsed.path, backup.read_bytes().decode("utf-8", "surrogateescape"))   # the original back
            raise ScanStopped(f"the {' and '.join(a[:-1] for a in arrays)} block did not reach the launch command; "
                              f"the script was restored from {backup.name}", path=parsed.path,
                              hint="add the PROFILER block by hand")
        parsed = res.parsed = check
        console.panel(plan.reason, "stage 2 · profiler block")
        console.diff(res.diff)
    else:
        console.panel(plan.reason + " — script left unchanged", "stage 2 · profiler block")

    # ---- stage 3: run
    console.say(f"stage 3 · running the full RL script (training + rollout in one run). Expected wait: "
                f"[bold]{expected_wait(parsed.config.get('model_id', UNKNOWN))}[/]. Output: {escape(output_dir)}")
    log = output_dir / "run.log"
    run = run_script(parsed.path, script_args, env, log, console=console if progress else None,
                     timeout_s=timeout_s)
    res.run = run
    console.say(f"stage 3 · run finished in {run.elapsed_s:.1f} s, exit status {run.returncode}; "
                f"phases seen: {', '.join(run.phases) or 'none'}; log: {escape(run.log_path)}")
    if run.returncode != 0 or run.interrupted:
        st = collect_torch(output_dir) if profiler == "torch" else collect(output_dir, seam, probe, env, run_analyse=False)
        st.run = _run_record(run)
        found = ", ".join(f"{s.side}:{s.path} ({s.status})" for s in st.sources if s.status != "failed") or "none"
        try:
            write_stage3(st, output_dir / STAGE3_FILE)
        except OSError:
            pass
        console.panel("\n".join(run.tail[-20:]) or "(no output)", "last lines of the RL log")
        what = run.reason or f"exit status {run.returncode}"
        raise ScanStopped(f"stage 3 stopped: the RL script failed ({what}); log kept at {run.log_path}; "
                          f"partial output kept in {output_dir} (usable captures: {found}); the lake was not changed",
                          path=parsed.path)
    if profiler == "torch":
        st = collect_torch(output_dir)
        collection = ("tilake scan --profiler torch: full RL script run, verl global_profiler.tool=torch (training "
                      "worker traces; rollout discrete vLLM traces)")
        tags = {"scan": "full", "profiler": "torch"}
    else:
        st = collect(output_dir, seam, probe, env, run_analyse=True, console=console if progress else None)
        collection = ("tilake scan: full RL script run, verl global_profiler (training e2e DB; rollout "
                      "discrete raw *_ascend_pt → analyse())")
        if not seam.real:
            collection += f" — via {seam.name}, not an NPU"
        tags = {"scan": "full", "npu_seam": seam.name}
    st.run = _run_record(run)
    res.stage3 = st
    write_stage3(st, output_dir / STAGE3_FILE)
    console.stage3(stage3_view(st))
    meta = run_meta(parsed, probe, st, collection, tags)
    # the environment the script ran with: its switches, unless the script sets them itself
    meta["settings"] = {**settings_from_env(env or {}), **(meta.get("settings") or {})}
    res = _stages_4_5(res, st, output_dir, lake, rid, out_dir, meta, lang, console, progress, rl_step, ray)
    if dump:   # collection runs of one request after the profiled one, into the same run id
        res.dump = scan_dump_phase(parsed, script_args, env, lake.root, rid, output_dir, out_dir, console, progress,
                                   timeout_s, max_rounds, res.report_path)
    return res


def _torch_probe(parsed: ParsedScript, env: Mapping[str, str], script_args: Sequence[str], res: ScanResult,
                 console: ScanConsole, dump: bool = False, allow_preamble: bool = False) -> NpuProbe:
    """Stage 1b for ``--profiler torch``: the fixed probe, or (``allow_preamble``) the script's own interpreter after
    its preamble; fills ``res.checks`` and says which one ran."""
    words = [w.raw for w in parsed.launch.words]
    idx = next((k for k, w in enumerate(words) if w == "-m"), 0) + 1
    interp = interpreter_words(words, idx)
    modules = default_modules(str(parsed.config.get("infer_backend", UNKNOWN))) + (["msprobe"] if dump else [])
    launch_start = parsed.launch.words[0].start
    if allow_preamble:
        console.say("stage 1 · --allow-preamble: the script's preamble (its unconditional environment lines) runs "
                    "before the probe")
        with console.status(f"stage 1 · replaying the script's preamble, then `{interp} -c 'import "
                            f"{', '.join(modules)}'` …"):
            se = probe_script_env(parsed.path, parsed.text, launch_start, interp, modules, env, script_args)
    else:
        skipped: List[str] = []
        pre = preamble_text(parsed.text, launch_start, str(parsed.path), skipped)
        n_pre = len([ln for ln in pre.splitlines() if ln.strip()])
        console.say("stage 1 · environment check: fixed probe only, nothing of the script runs"
                    + (f" (its {n_pre} preamble line(s) not replayed: pass --allow-preamble to check in the "
                       "environment the script builds)" if n_pre else ""))
        with console.status(f"stage 1 · fixed probe `python -c 'import {', '.join(modules)}'` …"):
            se = probe_fixed_env(interp, modules, env)
        se.preamble, se.skipped = pre, skipped
    res.checks = check_environment_torch(parsed, se, modules, env)
    if dump:
        msprobe_fix(res.checks)
    pkgs = {k: v for k, v in se.modules.items() if k != "torch"}
    return NpuProbe(seam="torch.profiler", real=True, python=se.python, torch=se.modules.get("torch"),
                    packages=pkgs)


def _run_record(run: RunResult) -> Dict[str, Any]:
    return {"returncode": run.returncode, "interrupted": run.interrupted, "elapsed_s": round(run.elapsed_s, 1),
            "log": str(run.log_path) if run.log_path else None, "phases": run.phases, "reason": run.reason}


def _stages_4_5(res: ScanResult, st: Optional[Stage3], output_dir: Path, lake: Lake, rid: str, out_dir: Path,
                meta: Dict[str, Any], lang: str, console: ScanConsole, progress: bool,
                rl_step: Optional[int] = None, ray: Optional[str] = None) -> ScanResult:
    if st is not None and not st.comparison_possible:
        res.status = "comparison_skipped"
        res.report_path = write_skipped_report(st, out_dir, run_id=rid, meta=meta, lang=lang)
        console.panel(f"fallback 3: {st.to_json()['reason']}.\nReport with every operation attempted: "
                      f"{res.report_path}\nThe lake was not changed.", "stages 4–5 skipped", border_style="red")
        return res
    from tilake.pipeline.profile import run_profile

    log = output_dir / "run.log"
    if log.is_file() and "log_path" not in meta:
        # the log of the run the scan started (stage 3 writes it here): verl's mismatch metrics
        meta["log_path"] = str(log.resolve())
        meta["_metrics"] = read_rl_metrics(log)
    try:
        pr = run_profile(output_dir, lake, rid, out_dir, run_meta=meta, lang=lang, allow_missing=True,
                         progress=progress, rl_step=rl_step, ray=ray)
    except TilakeError as exc:
        if res.run is None:          # --from-output: nothing expensive to protect
            raise
        script = res.parsed.path if res.parsed else ""
        raise ScanStopped(f"stages 4–5 failed after a successful run: {exc}; the captures are kept in {output_dir}",
                          hint=f"retry stages 4–5 without re-running: tilake scan --from-output {output_dir} {script}"
                          ) from exc
    res.status = pr.status
    res.report_path, res.csv_path, res.grade_counts = pr.report_path, pr.csv_path, pr.grade_counts
    res.warnings = list(pr.warnings)
    grades = ", ".join(f"{g}: {n}" for g, n in sorted(pr.grade_counts.items())) or "no rows"
    evidence = ", ".join(f"{s}: {EVIDENCE_WORDS.get(v, v)}" for s, v in sorted((pr.evidence or {}).items())) or "none"
    files = [("report", pr.report_path), ("chart", pr.chart_path), ("CSV", pr.csv_path),
             *(("ops", p) for p in pr.runtime_ops or []),
             *((k, pr.outputs[k]) for k in ("html", "numeric_csv", "xlsx") if (pr.outputs or {}).get(k))]
    listed = "\n".join(f"{k}: {p}" for k, p in files if p)   # every output written, one per line
    console.panel(f"run id: {rid}\nlake: {lake.root}\n{listed}\n"
                  f"evidence: {evidence}\nrows per grade: {grades}\nstatus: {pr.status}", "stages 4–5 · report")
    return res


def _torch_output(output_dir: Path) -> bool:
    """A recorded folder of PyTorch-profiler traces only (no ``*_ascend_pt`` folder, no Ascend DB)."""
    from tilake.ingest.torch.find import find_traces

    if any(p.is_dir() for p in output_dir.rglob("*_ascend_pt")) or any(output_dir.rglob("ascend_pytorch_profiler*.db")):
        return False
    return bool(find_traces(output_dir))


def scan_from_output(output_dir: Path, lake: Lake, *, run_id: Optional[str] = None, out_dir: Optional[Path] = None,
                     lang: str = "zh", script: Optional[Path] = None, env: Optional[Mapping[str, str]] = None,
                     console: Any = None, progress: bool = True, rl_step: Optional[int] = None,
                     ray: Optional[str] = None) -> ScanResult:
    """Stages 4–5 on recorded ``profiler_output`` (nothing inside it is modified). A folder of PyTorch-profiler
    traces only is checked as ``--profiler torch`` output (:func:`tilake.ingest.scan.collect.collect_torch`).

    Args:
        output_dir: the recorded folder. script: the launch script that produced it (optional:
            gives the model id, parsed config and the same run id as a full scan of that script).
    Raises:
        TilakeError: missing folder, unparsable script, pipeline errors.
    """
    console = ScanConsole.wrap(console)
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise TilakeError("profiler output folder does not exist" if not output_dir.exists()
                          else "not a folder (expected a verl profiler_output/)", path=output_dir)
    parsed = parse_script(script, env=dict(os.environ if env is None else env)) if script else None
    if parsed is not None:
        console.config(config_view(parsed))
        rid = run_id or parsed.run_id()
    else:
        from tilake.pipeline.profile import default_run_id
        rid = run_id or "scan-" + default_run_id(output_dir)
    validate_run_id(rid)
    out_dir = Path(out_dir or ".")
    res = ScanResult(rid, "running", parsed, output_dir=output_dir)
    torch_only = _torch_output(output_dir)
    st = collect_torch(output_dir) if torch_only else collect(output_dir, npu_seam.RecordedOutputSeam(), None, env,
                                                               run_analyse=False)
    recorded = output_dir / STAGE3_FILE
    st_json = None
    if recorded.is_file():
        try:
            st_json = json.loads(recorded.read_text(encoding="utf-8"))
        except ValueError:
            st_json = None
        if not isinstance(st_json, dict):
            st_json = None
        if st_json:
            console.say(f"stage 3 record of the original scan: {escape(recorded)}")
    res.stage3 = st
    console.stage3(stage3_view(st))
    tags = {"scan": "from-output"}
    meta = run_meta(parsed, None, st, "tilake scan --from-output: recorded verl profiler output", tags)
    if recorded.is_file() and st_json:
        # show what the original scan did (analyse() calls, fallbacks) before this re-check
        merged = dict(meta["rl_config"]["stage3"])
        merged["operations"] = ([f"(scan) {line}" for line in st_json.get("operations", [])]
                                + [f"(--from-output) {line}" for line in merged["operations"]])
        merged["recorded"] = {k: st_json.get(k) for k in ("seam", "real", "comparison", "reason", "sides", "run")}
        meta["rl_config"]["stage3"] = meta["stage3"] = merged
    meta["source_path"] = str(output_dir.resolve())
    if not st.comparison_possible:
        res.status = "comparison_skipped"
        res.report_path = write_skipped_report(st, out_dir, run_id=rid, meta=meta, lang=lang)
        console.panel(f"{st.to_json()['reason']}.\nReport: {res.report_path}\nThe lake was not changed.",
                      "stages 4–5 skipped", border_style="red")
        return res
    return _stages_4_5(res, st, output_dir, lake, rid, out_dir, meta, lang, console, progress, rl_step, ray)


def cli_scan(script: Optional[Path], *, from_output: Optional[Path] = None, lake: Lake, run_id: Optional[str] = None,
             out_dir: Path = Path("."), lang: str = "zh", dry_run: bool = False, timeout_s: Optional[float] = None,
             script_args: Sequence[str] = (), fmt: str = "text", profiler: str = "npu", rl_step: Optional[int] = None,
             ray: Optional[str] = None, dump: bool = False, max_rounds: int = 3, allow_preamble: bool = False) -> int:
    """Body of ``tilake scan`` (kept here so ``cli.py`` stays thin). Returns the exit status:
    0 report written, 1 comparison skipped (fallback 3); errors raise :class:`TilakeError` (exit 2).
    ``fmt="json"``: the tables go to stderr and :func:`result_json` is written to stdout."""
    if lang not in ("zh", "en"):
        raise TilakeError(f"--lang must be zh or en, not {lang!r}")
    if fmt not in ("text", "json"):
        raise TilakeError(f"--format must be text or json, not {fmt!r}")
    console = ScanConsole(stderr=fmt == "json")
    if from_output is not None:
        if dry_run or script_args or dump or allow_preamble:
            raise TilakeError("--from-output runs stages 4–5 only: --dry-run, --dump, --allow-preamble and script "
                              "arguments do not apply")
        res = scan_from_output(from_output, lake, run_id=run_id, out_dir=out_dir, lang=lang, script=script,
                               console=console, progress=fmt == "text", rl_step=rl_step, ray=ray)
    else:
        if script is None:
            raise TilakeError("give the RL launch script (tilake scan run_qwen3.sh) or --from-output DIR")
        res = scan(script, lake, run_id=run_id, out_dir=out_dir, lang=lang, script_args=script_args,
                   timeout_s=timeout_s, dry_run=dry_run, console=console, progress=fmt == "text", profiler=profiler,
                   rl_step=rl_step, ray=ray, dump=dump, max_rounds=max_rounds, allow_preamble=allow_preamble)
    if fmt == "json":
        emit_json(result_json(res))
    return ExitCode.SCAN_SKIPPED if res.status == "comparison_skipped" else ExitCode.DONE
