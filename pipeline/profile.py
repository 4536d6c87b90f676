"""The foundation pipeline: profiler output → lake (ingest) → marts (dbt build) → report.

Used by ``tilake run``, ``tilake example`` and stages 4–5 of ``tilake scan``.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from tilake.lake.warehouse import build_swapped
from tilake.errors import TilakeError
from tilake.files import check_out_dir
from tilake.lake.store import Lake, validate_run_id
from tilake.ingest.profiler.load import IngestResult, ingest_profile
from tilake.ingest.profiler.discover import Capture, discover, explicit


@dataclass
class ProfileResult:
    """Outcome of :func:`run_profile`.

    Attributes:
        status: ``ok`` (both sides have device evidence, or CPU ops of CPU-only torch traces:
            ``evidence`` says ``cpu_ops``), ``host_fallback`` (a side relies on
            host-side API statistics) or ``evidence_missing``.
        grade_counts: comparison rows per grade (``red``/``orange``/``yellow``/``green``/
            ``evidence_missing``).
    """

    run_id: str
    report_path: Path
    csv_path: Path
    runtime_ops: List[Path]
    chart_path: Optional[Path]
    grade_counts: Dict[str, int]
    evidence: Dict[str, str]
    status: str
    ingest: IngestResult
    warnings: List[str] = field(default_factory=list)


def _warning_text(node: tuple) -> str:
    """A dbt warning in the user's terms."""
    name, _kind, _status, message = node
    if name.startswith("tilake_is_empty_fct_uncategorized_kernels"):
        n = "".join(ch for ch in message.split("results")[0] if ch.isdigit()) or "some"
        return (f"{n} kernel name(s) match no op_catalog entry (listed under 'uncategorized' in the report; "
                "extend dbt_project/seeds/op_catalog.csv)")
    return f"dbt test {name}: {message}"


def default_run_id(source: Path) -> str:
    """Deterministic run id from a folder: its name plus a short hash of its absolute path."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", Path(source).resolve().name) or "run"
    return f"{name[:40]}-{hashlib.sha1(str(Path(source).resolve()).encode()).hexdigest()[:8]}"


def collect_captures(profiler_output: Optional[Path], train: Sequence[Path] = (),
                     infer: Sequence[Path] = ()) -> List[Capture]:
    """Captures from a verl ``profiler_output`` folder and/or explicit per-side paths.

    Explicit paths replace discovery for their side.
    Raises:
        TilakeError: nothing given, or a path holds no capture.
    """
    caps: List[Capture] = []
    if profiler_output is not None:
        found = discover(Path(profiler_output))
        caps += [c for c in found if not ((c.side == "train" and train) or (c.side == "infer" and infer))]
    for p in train:
        caps += explicit(Path(p), "train")
    for p in infer:
        caps += explicit(Path(p), "infer")
    if not caps:
        raise TilakeError("give a profiler_output folder or --train/--infer paths")
    unique, seen = [], set()
    for c in caps:  # the same capture named twice (folder and DB file) is read once
        key = (c.side, c.kind, str(Path(c.path).resolve()))
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return unique


def source_description(profiler_output: Optional[Path], train: Sequence[Path] = (),
                       infer: Sequence[Path] = ()) -> str:
    """Where a run's captures came from: the profiler_output folder and/or the explicit paths."""
    parts = [str(Path(profiler_output).resolve())] if profiler_output is not None else []
    parts += [f"train={Path(p).resolve()}" for p in train] + [f"infer={Path(p).resolve()}" for p in infer]
    return "; ".join(parts)


def run_profile(profiler_output: Optional[Path], lake: Lake, run_id: str, out_dir: Path,
                run_meta: Optional[Dict] = None, lang: str = "zh", train: Sequence[Path] = (),
                infer: Sequence[Path] = (), allow_missing: bool = False,
                progress: bool = True) -> ProfileResult:
    """Ingest → dbt build → report for one run; returns where everything landed.

    Args:
        profiler_output: verl ``profiler_output/`` (or None with explicit ``train``/``infer``).
        lake: target lake; the writer lock is held for ingest and build.
        run_id: validated id; re-running replaces the run's partitions.
        out_dir: folder for the report, CSV, runtime-ops JSON and chart.
        run_meta: ``runs`` row values (model_id, model_family, parallel_config, rl_config, …).
        allow_missing: record sides without device evidence (the report says evidence_missing)
            instead of failing.
    Raises:
        TilakeError: bad input (the lake is unchanged), dbt failure, report failure.
    """
    validate_run_id(run_id)
    check_out_dir(out_dir)
    caps = collect_captures(profiler_output, train, infer)
    meta = dict(run_meta or {})
    meta.setdefault("source_path", source_description(profiler_output, train, infer))
    with lake.locked():
        ing = ingest_profile(lake, run_id, caps, meta, allow_missing=allow_missing, progress=progress,
                             hold_lock=False)
        build = build_swapped(lake, hold_lock=False)
    if not build.success:
        failed = "; ".join(f"{n[0]}: {n[3].splitlines()[0] if n[3] else n[2]}" for n in build.failures[:3])
        raise TilakeError(f"dbt build failed ({failed})", path=lake.root)
    from tilake.reports.op_diff import write_report

    out = write_report(lake.warehouse, run_id, out_dir, lang)
    ev = out["evidence"]
    status = ("evidence_missing" if "evidence_missing" in ev.values()
              else "host_fallback" if "host_fallback" in ev.values() else "ok")
    warnings = [_warning_text(n) for n in build.warnings]
    warnings += [f"{c.capture.side} rank {c.capture.rank} ({c.capture.path}): {c.status} — {c.reason}"
                 for c in ing.captures if c.status not in ("ok",)]
    return ProfileResult(run_id, out["report"], out["csv"], out["runtime_ops"], out["chart"],
                         out["grade_counts"], ev, status, ing, warnings)
