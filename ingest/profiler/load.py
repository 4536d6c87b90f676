"""Ingest profiler captures of one run (both sides, every rank) into the lake, atomically.

Entry point: :func:`ingest_profile`. Per capture it records capture health (rows per table,
schema variant, profiler level, truncated session, status + reason) and writes kernels, host ops,
call stacks and MSTX ranges. The evidence gate:

* a capture with zero device kernels while its host tables have rows is ``evidence_missing`` with
  the reason (unless its text exports give device rows, or ``api_statistic.csv`` gives the
  host-side fallback, status ``host_fallback``);
* an unparsed raw ``*_ascend_pt`` folder is ``unparsed`` (hint: run ``analyse()``);
* a *side* with no usable capture at all fails the ingest with one line (lake unchanged) unless
  ``allow_missing`` — then the side is recorded as ``evidence_missing`` and every report says so.
"""
from __future__ import annotations

import json
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Dict, List, Optional, Sequence

from tilake.lake import schema
from tilake.errors import TilakeError
from tilake.lake.store import Lake
from tilake.ingest.profiler.db import (check_header, file_size, load_db, probe, profiler_level_from_db,
                          readable_copy, session_fields, sha256_file, table_rows_json)
from tilake.ingest.profiler.discover import Capture
from tilake.ingest.profiler.text import load_text
from tilake.ingest.torch.load import ingest_trace

USABLE = ("ok", "host_fallback")


@dataclass
class CaptureResult:
    """Outcome for one capture: status ∈ ok | host_fallback | evidence_missing | unparsed."""

    capture: Capture
    status: str
    reason: str = ""
    kernels: int = 0
    host_ops: int = 0
    source_kind: str = ""
    evidence: str = ""  # torch traces: device | cpu_ops (CPU-only trace)


@dataclass
class IngestResult:
    """Outcome of one ingest: per-capture results and per-side evidence.

    Attributes:
        side_evidence: side → ``device`` | ``cpu_ops`` (CPU-only torch traces: CPU ops stand for
            kernels) | ``host_fallback`` | ``evidence_missing``.
        side_reason: side → why evidence is missing (empty when present).
    """

    run_id: str
    captures: List[CaptureResult] = field(default_factory=list)
    side_evidence: Dict[str, str] = field(default_factory=dict)
    side_reason: Dict[str, str] = field(default_factory=dict)

    @property
    def kernels(self) -> int:
        """Kernel rows written (all sides)."""
        return sum(c.kernels for c in self.captures)


def _host_rows(pr) -> int:
    return sum(pr.rows.get(t, 0) for t in ("PYTORCH_API", "CANN_API"))


def _ingest_db(cap: Capture, w, part: Dict, row: Dict, say=None) -> CaptureResult:
    wal = check_header(cap.path)
    row.update(size_bytes=file_size(cap.path))
    # hash the input in a thread while DuckDB reads it (hashlib releases the GIL on large blocks)
    hasher = ThreadPoolExecutor(max_workers=1)
    digest = hasher.submit(sha256_file, cap.path)
    try:
        return _ingest_db_inner(cap, w, part, row, wal, say)
    finally:
        row["sha256"] = digest.result()
        hasher.shutdown()


def _ingest_db_inner(cap: Capture, w, part: Dict, row: Dict, wal: bool, say=None) -> CaptureResult:
    with readable_copy(cap.path, wal) as db:
        pr = probe(db)
        if not pr.has("STRING_IDS") and not pr.has("TASK") and not pr.has("PYTORCH_API"):
            raise TilakeError("SQLite file holds no torch_npu profiler tables (no STRING_IDS/TASK/PYTORCH_API)",
                              path=cap.path)
        row.update(schema_variant=pr.schema_variant + ("+wal" if wal else ""), schema_version=pr.schema_version,
                   table_rows=table_rows_json(pr), **session_fields(pr, db))
        if not row.get("profiler_level") and pr.rows.get("COMPUTE_TASK_INFO"):
            row["profiler_level"] = profiler_level_from_db(db)
        # device evidence = compute kernels (COMPUTE_TASK_INFO ⋈ TASK); HCCL ops alone do not count
        res = load_db(db, pr, w, part, row["capture_id"], shown=cap.path, say=say)
        row["invalid_rows"] = json.dumps(dict(sorted(res.invalid.items())), separators=(",", ":")) if res.invalid else None
        if res.compute_kernels:
            return CaptureResult(cap, "ok", res.invalid_note(), res.kernels, res.host_ops, "db")
        missing = ("no COMPUTE_TASK_INFO table" if not pr.has("COMPUTE_TASK_INFO")
                   else "COMPUTE_TASK_INFO ⋈ TASK has 0 rows")
        reason = (f"{missing} while host tables have {_host_rows(pr)} rows "
                  "(PYTORCH_API + CANN_API): device kernels were not exported")
    # DB without device rows: fall back to the text exports beside it
    if cap.text_dir is not None:
        txt = _ingest_text(cap, w, part, row, reason_prefix=reason + "; ")
        if txt.status in USABLE:
            return txt
    return CaptureResult(cap, "evidence_missing", reason, res.kernels, res.host_ops, "db")


def _ingest_text(cap: Capture, w, part: Dict, row: Dict, reason_prefix: str = "") -> CaptureResult:
    n_rows, nh, _ns, src, evidence, nk = load_text(cap.text_dir or cap.path, w, part, row["capture_id"])
    if not row.get("table_rows"):  # capture health of a text export: rows read per CSV
        counts = {src: n_rows} if src else {}
        if nh:
            counts["operator_details.csv"] = nh
        row["table_rows"] = json.dumps(counts, separators=(",", ":"))
    if nk:
        status = "ok" if evidence == "device" else "host_fallback"
        aggregated = (f": {nk} kernels in {n_rows} op-type rows (sum of Count); kernel names are not "
                      "available at that level" if src == "op_statistic.csv" else "")
        why = (f"{reason_prefix}device rows from {src}{aggregated}" if evidence == "device"
               else f"{reason_prefix}host-side fallback, not device: CANN API statistics from {src}")
        return CaptureResult(cap, status, why, nk, nh, "text")
    return CaptureResult(cap, "evidence_missing",
                         f"{reason_prefix}no kernel_details.csv, op_statistic.csv or api_statistic.csv rows "
                         f"in {cap.text_dir or cap.path}", 0, nh, "text")


def ingest_profile(lake: Lake, run_id: str, captures: Sequence[Capture], run_meta: Optional[Dict] = None,
                   allow_missing: bool = False, progress: bool = True) -> IngestResult:
    """Ingest every capture of one run, replacing any earlier ingest of ``run_id``.

    Writes inside :meth:`Lake.writing` (the caller's door, or its own when called alone).

    Args:
        lake: target lake. run_id: validated id (``[A-Za-z0-9._-]+``).
        captures: from :func:`tilake.ingest.profiler.discover.discover` or ``explicit``.
        run_meta: values for the ``runs`` row (model_id, model_family, parallel_config, …);
            anything missing is written ``unknown``/NULL, never guessed.
        allow_missing: record sides without device evidence instead of failing.
    Returns:
        :class:`IngestResult`.
    Raises:
        TilakeError: a capture file is not SQLite or is truncated/unreadable; a side has no usable
            evidence and ``allow_missing`` is False. The lake is unchanged in every error case.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    result = IngestResult(run_id)
    meta = dict(run_meta or {})
    with lake.write_run(run_id, schema.PROFILE_TABLES) as w:
        cols = [TextColumn("[bold]ingest[/] {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn()]
        with Progress(*cols, disable=not progress, transient=True) as bar:
            task = bar.add_task(run_id, total=len(captures))
            for cap in captures:
                bar.update(task, description=f"{cap.side} rank {cap.rank}: {cap.path.name}")
                part = {"side": cap.side, "rank": cap.rank}
                row = {"capture_id": cap.capture_id, "path": str(cap.path), "source_kind": cap.kind,
                       "profiler_level": cap.level}
                if cap.kind == "db":
                    res = _ingest_db(cap, w, part, row, say=lambda text, cap=cap: bar.update(
                        task, description=f"{cap.side} rank {cap.rank}: {text}"))
                elif cap.kind == "text":
                    res = _ingest_text(cap, w, part, row)
                elif cap.kind == "trace":
                    tr = ingest_trace(cap.path, w, part, row["capture_id"])
                    row.update(tr.capture, size_bytes=file_size(cap.path), sha256=sha256_file(cap.path))
                    res = CaptureResult(cap, tr.status, tr.reason, tr.kernels, tr.host_ops, "trace", tr.evidence)
                elif cap.kind == "raw":
                    res = CaptureResult(cap, "unparsed",
                                        "raw profiler data not parsed (FRAMEWORK/ and PROF_* only): run "
                                        f"torch_npu.profiler.profiler.analyse('{cap.path}') on the Ascend host, "
                                        "then ingest again")
                else:
                    res = CaptureResult(cap, "evidence_missing", "empty *_ascend_pt folder (no DB, CSV or raw data)")
                row.update(status=res.status, reason=res.reason, kernel_count=res.kernels,
                           host_op_count=res.host_ops)
                if res.source_kind:
                    row["source_kind"] = res.source_kind
                row.setdefault("backend", {"db": "ascend_db", "text": "ascend_text"}.get(row["source_kind"]))
                w.write_rows("captures", [row], part)
                result.captures.append(res)
                bar.advance(task)
        for side in ("train", "infer"):
            mine = [c for c in result.captures if c.capture.side == side]
            usable = [c for c in mine if c.status in USABLE]
            if usable:
                result.side_evidence[side] = (
                    "device" if any(c.status == "ok" and c.evidence != "cpu_ops" for c in usable)
                    else "cpu_ops" if any(c.status == "ok" for c in usable) else "host_fallback")
                result.side_reason[side] = ""
                continue
            why = (f"{mine[0].capture.path}: {mine[0].reason}" if mine
                   else f"no {side} capture was found")
            result.side_evidence[side] = "evidence_missing"
            result.side_reason[side] = why
            if not allow_missing:
                raise TilakeError(f"{side} side has no device evidence — {why}")
        meta.setdefault("host", socket.gethostname())
        meta["created_at"] = datetime.now(timezone.utc).replace(tzinfo=None)
        meta["kind"] = meta.get("kind") or "profile"
        for k in ("model_id", "model_family", "train_backend", "infer_backend"):
            meta[k] = meta.get(k) or "unknown"
        ev = {"side_evidence": result.side_evidence, "side_reason": result.side_reason}
        cfg = meta.get("rl_config") if isinstance(meta.get("rl_config"), dict) else {}
        meta["rl_config"] = {**cfg, "_evidence": ev} if cfg or ev else None
        meta["run_id"] = run_id
        w.write_rows("runs", [meta])
        from tilake.models.notes import source_notes
        w.write_rows("source_notes", source_notes(meta["model_family"]))
    return result
