"""What ``tilake scan`` shows, as plain facts: the stage tables, the planned diff and the fallback-3
report are drawn by :mod:`tilake.reports.scan_console` (rich, and the ``scan_skipped_report.md.j2``
template) from the views built here; nothing is sequenced here.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

from tilake.ingest.scan.collect import HOST_FALLBACK_LABEL, Stage3
from tilake.ingest.scan.env import Check
from tilake.ingest.scan.script import UNKNOWN, ParsedScript
from tilake.ingest.scan.shell import plain
from tilake.ingest.scan.verl_config import is_default
from tilake.reports.scan_console import ConfigView, ScanConsole, SkippedReportFacts, Stage3View
from tilake.reports.scan_console import write_skipped_report as _write_report

#: (label, config key) rows of the stage-1 table, in order
CONFIG_ROWS = [("training backend", "train_backend"), ("inference engine", "infer_backend"),
               ("model path", "model_path"), ("model id", "model_id"), ("train TP", "train_tp"),
               ("train PP", "train_pp"), ("train EP", "train_ep"), ("rollout TP", "infer_tp"),
               ("max_prompt_length", "max_prompt_length"), ("max_response_length", "max_response_length"),
               ("train_batch_size", "train_batch_size"), ("total_training_steps", "total_training_steps"),
               ("total_epochs", "total_epochs"), ("NPU devices", "visible_devices"),
               ("rollout enforce_eager", "rollout_enforce_eager"),
               ("rollout calculate_log_probs", "rollout_calculate_log_probs"), ("rollout n", "rollout_n")]


def shown_value(parsed: ParsedScript, key: str) -> str:
    """A config value as the table shows it: ``(default)`` appended when verl, not the script, sets it."""
    v = parsed.config.get(key, UNKNOWN)
    return f"{v} (default)" if is_default(parsed.sources.get(key, "")) else str(v)


def steps_note(parsed: ParsedScript) -> Optional[str]:
    """How long the run is about to be, and how to make it one step, when no step limit is set
    (``trainer.total_training_steps`` unset or above 1). None for a one-step run."""
    c = parsed.config
    steps, epochs = c.get("total_training_steps"), c.get("total_epochs")
    if isinstance(steps, int) and steps <= 1:
        return None
    length = (f"trainer.total_training_steps={steps}" if isinstance(steps, int)
              else f"{epochs} epoch(s) (trainer.total_epochs) with no step limit")
    how = (f"`tilake scan {parsed.path.name} -- trainer.total_training_steps=1`" if parsed.launch.passthrough
           else "trainer.total_training_steps=1 on the launch command (this script does not pass \"$@\" on)")
    return f"the run trains {length}; to profile one step only, use {how}"


def stage1_json(parsed: ParsedScript) -> Dict[str, Any]:
    """Stage 1 as plain data (``tilake scan --format json``): every value and source in full."""
    return {"script": str(parsed.path), "launch": {"module": parsed.launch.module, "line": parsed.launch.line,
                                                   "program": parsed.launch.program,
                                                   "overrides": {k: plain(v) for k, v in parsed.launch.overrides.items()},
                                                   "loops": parsed.launch_loops},
            "config": parsed.config, "sources": parsed.sources,
            "defaults": sorted(k for k, v in parsed.sources.items() if is_default(v)),
            "run_warnings": parsed.run_warnings, "warnings": parsed.warnings,
            "profiler": parsed.profiler, "steps_note": steps_note(parsed)}


def config_view(parsed: ParsedScript) -> ConfigView:
    """The stage-1 table as plain data: ``title``, ``rows`` of ``(item, shown value, unknown?, source)``,
    ``warnings`` (the run's) and ``notes`` (parser warnings, the profiler plan, the steps note)."""
    rows = [(label, shown_value(parsed, key), parsed.config.get(key, UNKNOWN) == UNKNOWN, parsed.sources.get(key, ""))
            for label, key in CONFIG_ROWS]
    notes = list(parsed.warnings + parsed.profiler.get("warnings", []))
    notes += [line for line in (parsed.profiler.get("plan"), steps_note(parsed)) if line]
    return {"title": f"stage 1 · parsed {parsed.path.name} (launch command on line {parsed.launch.line})",
            "rows": rows, "warnings": list(parsed.run_warnings), "notes": notes}


#: the console's words for a side's stage-3 status (:meth:`Stage3.side_status`)
SIDE_STATUS_WORDS = {"device": "device kernels", "host_fallback": HOST_FALLBACK_LABEL,
                     "trace": "PyTorch-profiler trace(s) found (kernels, or CPU ops on a CPU: decided at ingest)",
                     "failed": "no usable evidence"}


def stage3_view(st: Stage3) -> Stage3View:
    """Stage 3 as plain data: the table ``title``, ``operations``, ``known_warnings`` and ``sides`` as
    ``(side, words)`` (:data:`SIDE_STATUS_WORDS`)."""
    what = "captures" if st.seam.startswith("torch.profiler") else "captures and analyse()"
    return {"title": f"stage 3 · {what} ({st.seam}{'' if st.real else ', not torch_npu'})",
            "operations": st.operations, "known_warnings": st.known_warnings,
            "sides": [(s, SIDE_STATUS_WORDS[st.side_status(s)]) for s in ("train", "infer")]}


def print_config(console: Any, parsed: ParsedScript) -> None:
    """Draw :func:`config_view` on ``console`` (a :class:`~tilake.reports.scan_console.ScanConsole` or a rich
    ``Console``)."""
    ScanConsole.wrap(console).config(config_view(parsed))


def print_checks(console: Any, checks: List[Check]) -> None:
    """Draw the stage-1 environment checks on ``console``."""
    ScanConsole.wrap(console).checks(checks)


def print_diff(console: Any, diff: str) -> None:
    """Draw the planned or applied unified diff on ``console``."""
    ScanConsole.wrap(console).diff(diff)


def print_stage3(console: Any, st: Stage3) -> None:
    """Draw :func:`stage3_view` on ``console``."""
    ScanConsole.wrap(console).stage3(stage3_view(st))


def skipped_report_facts(st: Stage3, run_id: str, meta: Dict[str, Any]) -> SkippedReportFacts:
    """The facts of the fallback-3 report (``scan_skipped_report.md.j2``): metadata, each side's source,
    every operation attempted and the failed sides' notes; no grade is given."""
    j = st.to_json()
    meta_keys = ("model_id", "model_family", "train_backend", "infer_backend", "script_path", "collection_method")
    return {"model_id": meta.get("model_id", UNKNOWN), "reason": j["reason"],
            "metadata": [(k, meta.get(k, UNKNOWN)) for k in meta_keys], "run_id": run_id,
            "parallel_config_json": json.dumps(meta.get("parallel_config"), ensure_ascii=False),
            "seam": st.seam, "real": st.real, "generated_at": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
            "sources": [{"side": s.side, "label": s.label, "status": s.status, "path": s.path, "db": s.db,
                         "compute_task_info_rows": s.compute_task_info_rows, "fallback": s.fallback, "note": s.note}
                        for s in st.sources],
            "operations": list((meta.get("stage3") or {}).get("operations") or j["operations"]),
            "known_warnings": list(st.known_warnings),
            "failed_notes": [f"{s.side}: {s.note or s.status}" for s in st.sources if s.status == "failed"],
            "infer_failed": any(s.side == "infer" and s.status == "failed" for s in st.sources)}


def write_skipped_report(st: Stage3, out_dir: Path, *, run_id: str, meta: Dict[str, Any], lang: str) -> Path:
    """Seed fallback 3: the report when no comparison is possible (:func:`skipped_report_facts`, rendered by
    :func:`tilake.reports.scan_console.write_skipped_report`); returns its path."""
    return _write_report(skipped_report_facts(st, run_id, meta), Path(out_dir), lang)


def result_json(res: Any) -> Dict[str, Any]:
    """A scan's outcome (a :class:`tilake.pipeline.scan.ScanResult`) as plain data (``tilake scan --format json``):
    stage 1 in full, the checks, the planned or applied diff, the outputs (paths as strings, None when not written)
    and, with ``--dump``, the collection rounds (``dump``: :meth:`tilake.pipeline.scan_dump.DumpRounds.to_dict`)."""
    def opt(p: Optional[Path]) -> Optional[str]:
        return None if p is None else str(p)

    return {"run_id": res.run_id, "status": res.status,
            "stage1": stage1_json(res.parsed) if res.parsed is not None else None,
            "checks": [{"name": c.name, "ok": c.ok, "required": c.required, "found": c.detail, "fix": c.fix}
                       for c in res.checks],
            "diff": res.diff, "backup": opt(res.backup), "output_dir": opt(res.output_dir),
            "report": opt(res.report_path), "csv": opt(res.csv_path), "grade_counts": res.grade_counts,
            "warnings": res.warnings, **({"dump": res.dump.to_dict()} if res.dump is not None else {})}
