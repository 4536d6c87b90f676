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

Captures arrive deduplicated and with rank-less workers numbered (:mod:`.discover`); the reason of each
says which duplicates were ignored and how many workers make the side total. Steps (:mod:`.steps`): every
kernel gets its ``step``; per side only the steps every ranked capture with markers covers are counted
(or the one ``profiler_step``; :mod:`.step_window`), a rank without markers beside step-windowed ranks is left out
with a line, and ranks with an open tail are flagged.
The parallel layout of ``profiler_metadata.json`` (:mod:`.metadata`) fills ``runs.parallel_config`` when
the caller gave none.
"""
from __future__ import annotations

import contextlib
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set

from tilake import settings
from tilake.errors import TilakeError
from tilake.ingest.inputs import special_kind
from tilake.ingest.profiler.capture import identity_notes
from tilake.ingest.profiler.db import (
    check_header,
    file_size,
    load_db,
    probe,
    profiler_level_from_db,
    readable_copy,
    session_fields,
    sha256_file,
    sidecars,
    table_rows_json,
)
from tilake.ingest.profiler.discover import Capture
from tilake.ingest.profiler.evidence import USABLE, SideEvidence, side_evidence
from tilake.ingest.profiler.metadata import empty_reason, parallel_groups, parallel_layout, read_metadata
from tilake.ingest.profiler.step_window import restrict_steps, step_row
from tilake.ingest.profiler.steps import (
    StepCounts,
    StepMarks,
    assign_steps,
    db_step_marks,
    stage_launch_times,
    text_step_marks,
)
from tilake.ingest.profiler.text import load_text
from tilake.ingest.run_facts import RunMeta, versions_from_profiler_info
from tilake.ingest.torch.find import trace_versions
from tilake.ingest.torch.load import ingest_trace
from tilake.lake import schema
from tilake.lake.duck import connect, with_sqlite
from tilake.lake.rules import run_record as rules_run_record
from tilake.lake.store import Lake, RunWriter
from tilake.progress import Progress, progress_or_null
from tilake.vocab import CaptureStatus, Evidence


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
    marks: StepMarks = field(default_factory=StepMarks)
    step_counts: StepCounts = field(default_factory=StepCounts)
    files: List[Path] = field(default_factory=list)  # staged kernel Parquet files of this capture
    notes: List[str] = field(default_factory=list)   # duplicates, workers, steps: said in the reason
    steps_kept: Optional[List[int]] = None           # steps counted after the common-step restriction
    info: List[str] = field(default_factory=list)    # said in the reason only (not a console warning)
    invalid: int = 0                                 # rows kept but counted invalid (captures.invalid_rows)

    @property
    def status_shown(self) -> str:
        """The status as the console says it: ``ok`` only when no row was counted invalid."""
        return f"{self.status} with {self.invalid} invalid row(s)" if self.invalid else str(self.status)


@dataclass
class IngestResult:
    """Outcome of one ingest: per-capture results and per-side evidence.

    Attributes:
        sides: side → :class:`~tilake.ingest.profiler.evidence.SideEvidence` (the rule:
            :func:`~tilake.ingest.profiler.evidence.side_evidence`).
    """

    run_id: str
    captures: List[CaptureResult] = field(default_factory=list)
    sides: Dict[str, SideEvidence] = field(default_factory=dict)
    notes: List[str] = field(default_factory=list)  # side-level lines: workers merged, steps counted

    @property
    def side_evidence(self) -> Dict[str, str]:
        """side → ``device`` | ``cpu_ops`` | ``host_fallback`` | ``evidence_missing``."""
        return {s: e.evidence for s, e in self.sides.items()}

    @property
    def side_reason(self) -> Dict[str, str]:
        """side → why evidence is missing (empty when present)."""
        return {s: e.reason for s, e in self.sides.items()}

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
            if wal and "-wal" not in sidecars(cap.path):
                raise TilakeError("a WAL-mode database without its -wal file: the writer never checkpointed, so its "
                                  "tables live in the -wal that was not copied with it (no STRING_IDS/TASK/"
                                  f"PYTORCH_API in the .db alone); copy {cap.path.name}-wal from the host too",
                                  path=cap.path)
            raise TilakeError("SQLite file holds no torch_npu profiler tables (no STRING_IDS/TASK/PYTORCH_API)"
                              + (" after replaying its " + "/".join(sidecars(cap.path)) if sidecars(cap.path) else ""),
                              path=cap.path)
        rec = sidecars(cap.path)
        row.update(schema_variant=pr.schema_variant + ("+wal" if wal else "") + ("+journal" if "-journal" in rec else ""), schema_version=pr.schema_version,
                   table_rows=table_rows_json(pr), **session_fields(pr, db))
        if not row.get("profiler_level") and pr.rows.get("COMPUTE_TASK_INFO"):
            row["profiler_level"] = profiler_level_from_db(db)
        # device evidence = compute kernels (COMPUTE_TASK_INFO ⋈ TASK); HCCL ops alone do not count
        before = _kernel_files(w, part)
        res = load_db(db, pr, w, part, row["capture_id"], shown=cap.path, say=say)
        row["invalid_rows"] = json.dumps(dict(sorted(res.invalid.items())), separators=(",", ":")) if res.invalid else None
        marks = db_step_marks(db)
        if marks.ranges:  # launch times for the step assignment, while the (copied) DB is still here
            stage_launch_times(with_sqlite(w.con), db, sorted(_kernel_files(w, part) - before))
        if res.compute_kernels:
            return CaptureResult(cap, "ok", res.invalid_note(), res.kernels, res.host_ops, "db", marks=marks,
                                 invalid=sum(res.invalid.values()))
        missing = ("no COMPUTE_TASK_INFO table" if not pr.has("COMPUTE_TASK_INFO")
                   else "COMPUTE_TASK_INFO ⋈ TASK has 0 rows")
        reason = (f"{missing} while host tables have {_host_rows(pr)} rows "
                  "(PYTORCH_API + CANN_API): device kernels were not exported")   # → the text exports beside it
    if cap.text_dir is not None:
        txt = _ingest_text(cap, w, part, row, reason_prefix=reason + "; ")
        if txt.status in USABLE:
            return txt
    return CaptureResult(cap, CaptureStatus.EVIDENCE_MISSING, reason, res.kernels, res.host_ops, "db", marks=marks)


def _ingest_text(cap: Capture, w, part: Dict, row: Dict, reason_prefix: str = "") -> CaptureResult:
    invalid: Dict[str, int] = {}
    n_rows, nh, _ns, src, evidence, nk = load_text(cap.text_dir or cap.path, w, part, row["capture_id"], invalid)
    if invalid:   # kept but counted (capture health), like the DB path's invalid TASK spans
        row["invalid_rows"] = json.dumps(dict(sorted(invalid.items())), separators=(",", ":"))
        reason_prefix += (f"{sum(invalid.values())} kernels with invalid times kept for the kernel set, excluded "
                          f"from timings ({', '.join(f'{k}: {v}' for k, v in sorted(invalid.items()))}); ")
    if not row.get("table_rows"):  # capture health of a text export: rows read per CSV
        counts = {src: n_rows} if src else {}
        if nh:
            counts["operator_details.csv"] = nh
        row["table_rows"] = json.dumps(counts, separators=(",", ":"))
    if nk:
        status = CaptureStatus.OK if evidence == Evidence.DEVICE else CaptureStatus.HOST_FALLBACK
        aggregated = (f": {nk} kernels in {n_rows} op-type rows (sum of Count); kernel names are not "
                      "available at that level" if src == "op_statistic.csv" else "")
        why = (f"{reason_prefix}device rows from {src}{aggregated}" if evidence == Evidence.DEVICE
               else f"{reason_prefix}host-side fallback, not device: CANN API statistics from {src}")
        return CaptureResult(cap, status, why, nk, nh, "text")
    return CaptureResult(cap, CaptureStatus.EVIDENCE_MISSING,
                         f"{reason_prefix}no kernel_details.csv, op_statistic.csv or api_statistic.csv rows "
                         f"in {cap.text_dir or cap.path}", 0, nh, "text")


def _kernel_files(w, part: Dict) -> Set[Path]:
    """Staged kernel files of ``part`` written by ``w`` (a parallel worker sees only its own)."""
    d = w.staging / "kernels" / f"run_id={w.run_id}" / f"side={part['side']}" / f"rank={part['rank']}"
    return set(d.glob(f"{getattr(w, 'file_prefix', 'part-')}*.parquet")) if d.is_dir() else set()


def _ingest_one(cap: Capture, w, part: Dict, row: Dict, say=None) -> CaptureResult:
    kind = special_kind(cap.path) if cap.kind in ("db", "trace") else None
    if kind is not None:     # a FIFO/device where the DB or trace should be: skipped, never opened (it would block)
        return CaptureResult(cap, CaptureStatus.EVIDENCE_MISSING,
                             f"{cap.path.name} is {kind}, not a regular file: skipped, never opened")
    if cap.kind == "db":
        return _ingest_db(cap, w, part, row, say=say)
    if cap.kind == "text":
        return _ingest_text(cap, w, part, row)
    if cap.kind == "trace":
        # a rollout replica's / relocated capture's rank slot stays (every replica's engine says rank 0)
        tr = ingest_trace(cap.path, w, part, row["capture_id"], keep_rank=cap.rank_source in ("replica", "global_rank"))
        row.update(tr.capture, size_bytes=file_size(cap.path), sha256=sha256_file(cap.path))
        if part["rank"] != cap.rank:  # distributedInfo.rank after traceEvents: known only after the stream
            cap.rank = part["rank"]
        if tr.capture.get("rank_source"):
            cap.rank_source = tr.capture["rank_source"]
        marks = StepMarks("ProfilerStep#N (user_annotation)", list(tr.marks)) if tr.marks else StepMarks()
        return CaptureResult(cap, tr.status, tr.reason, tr.kernels, tr.host_ops, "trace", tr.evidence, marks=marks)
    if cap.kind == "raw":
        return CaptureResult(cap, "unparsed",
                             "raw profiler data not parsed (FRAMEWORK/ and PROF_* only): run "
                             f"torch_npu.profiler.profiler.analyse('{cap.path}') on the Ascend host, "
                             "then ingest again")
    return CaptureResult(cap, CaptureStatus.EVIDENCE_MISSING, empty_reason(cap.pt_dir or cap.path))


def _run_one(cap: Capture, w, row: Dict, say) -> CaptureResult:
    """Ingest one capture through writer ``w`` and assign its kernels to steps (on ``w.con``, where
    :func:`stage_launch_times` left the ``_launch`` table)."""
    part = {"side": cap.side, "rank": cap.rank}
    say(cap.path.name)
    before = _kernel_files(w, part)
    w.con.execute("DROP TABLE IF EXISTS _launch")
    res = _ingest_one(cap, w, part, row, say=say)
    res.files = sorted(_kernel_files(w, part) - before)
    if res.source_kind == "text" and not res.marks.ranges:
        res.marks = text_step_marks(cap.text_dir or cap.path)
    if res.status in USABLE and res.files and res.marks.ranges:
        res.step_counts = assign_steps(w.con, res.files, res.marks)
    res.notes = identity_notes(cap)
    if res.status not in USABLE and cap.pt_dir is not None and not res.marks.ranges:
        res.marks = text_step_marks(cap.pt_dir / "ASCEND_PROFILER_OUTPUT")
        if res.marks.ranges:
            res.notes.append(f"{res.marks.source} lists step(s) {res.marks.steps}")
    return res


WORKER_MIN_MIB = 256
"""Least memory limit share of one parallel ingest worker (fewer workers under a small limit)."""


def _share_of(limit: str, n: int) -> str:
    """``limit`` (a DuckDB size, validated by :func:`tilake.settings.check_memory_limit`) split in ``n``
    equal parts, as ``'<m>MiB'`` (at least 64 MiB each); ``limit`` itself when it is not a size."""
    total = settings.size_bytes(limit)
    return limit if total is None else f"{max(64, (total // n) >> 20)}MiB"


def _workers_for(limit: str, n: int) -> int:
    """At most ``n`` workers, each with at least :data:`WORKER_MIN_MIB` of ``limit`` (at least one): a
    2 M-row range join of one big capture needs a few hundred MiB (BR-22)."""
    total = settings.size_bytes(limit)
    return n if total is None else max(1, min(n, (total >> 20) // WORKER_MIN_MIB))


class _WorkerWriter(RunWriter):
    """The run's writer as one ingest worker sees it: same staging folder and tables, its own DuckDB
    instance (``1/n`` of the memory limit, ``cores/n`` threads, its own spill folder) and its own
    Parquet file names (``part-w<index>-<seq>.parquet``, :attr:`file_prefix`), so workers never share a
    temp table, an ATTACHed DB or a file, and two captures of one partition (rollout replicas that all
    say rank 0) can run at once."""

    def __init__(self, parent: RunWriter, index: int, memory: str, threads: int) -> None:
        super().__init__(parent.lake, parent.run_id, parent.tables, parent.staging)
        self.file_prefix = f"part-w{index:02d}-"
        self._memory, self._threads = memory, threads

    def _target(self, table: str, partition: Dict) -> Path:
        path = super()._target(table, partition)
        return path.with_name(self.file_prefix + path.name[len("part-"):])

    @property
    def con(self):
        """The worker's private in-memory DuckDB connection (the SQLite scanner: :meth:`sqlite_con`)."""
        if self._con is None:
            self._con = connect()
            self._con.execute(f"SET memory_limit = '{self._memory}'")
            self._con.execute(f"SET threads = {self._threads}")
        return self._con


def _run_captures(w: RunWriter, captures: Sequence[Capture], rows: List[Dict], bar, task,
                  workers: Optional[int]) -> List[CaptureResult]:
    """Ingest ``captures`` (``rows[i]`` is the captures row of ``captures[i]``); results in input order.

    Captures run in parallel threads (torch traces: one at a time), each worker with its own DuckDB
    instance and file names (:class:`_WorkerWriter`; DuckDB, sqlite3 and hashlib release the GIL). The
    rows written are those of a one-by-one ingest; only the Parquet file names differ. The first failing
    capture in input order raises (the others are cancelled or interrupted; Ctrl-C becomes a one-line
    TilakeError), and the caller's :meth:`Lake.write_run` leaves the lake unchanged. Measured:
    bench/README.md "Parallel rank ingest" (16 DBs, 2 cores: 0.39× the sum of single-capture ingests).
    """
    def say_for(cap):
        return lambda text: bar.update(task, description=f"{cap.side} rank {cap.rank}: {text}")

    n = max(1, min(workers or _workers_for(settings.memory_limit(), settings.cores()), len(captures)))
    if any(c.kind == "trace" for c in captures):  # torch-trace ingest sets the spill folder of its connection
        n = 1                                       # to one shared staging/spill: one at a time
    results: List[Optional[CaptureResult]] = [None] * len(captures)
    if n == 1:
        for i, cap in enumerate(captures):
            results[i] = _run_one(cap, w, rows[i], say_for(cap))
            bar.advance(task)
        return results
    memory, threads = _share_of(settings.memory_limit(), n), max(1, settings.cores() // n)
    pool = [_WorkerWriter(w, k, memory, threads) for k in range(n)]
    free = list(pool)
    lock = threading.Lock()

    def run(i: int) -> None:
        with lock:
            ww = free.pop()
        try:
            results[i] = _run_one(captures[i], ww, rows[i], say_for(captures[i]))
            bar.advance(task)
        finally:
            with lock:
                free.append(ww)

    ex = ThreadPoolExecutor(max_workers=n, thread_name_prefix="tilake-ingest")
    futures = [ex.submit(run, i) for i in range(len(captures))]
    try:
        for f in futures:  # input order: the first failing capture is the one a sequential ingest names
            f.result()
    except BaseException as exc:
        for f in futures:
            f.cancel()
        for ww in pool:
            with contextlib.suppress(Exception):
                if ww._con is not None:
                    ww._con.interrupt()
        if isinstance(exc, KeyboardInterrupt):  # as the one-capture path says it (db.load_db)
            raise TilakeError("interrupted by the user; the lake is unchanged") from exc
        raise
    finally:
        ex.shutdown(wait=True)
        for ww in pool:
            ww._close()
            for t, k in ww.rows_written.items():
                w.rows_written[t] = w.rows_written.get(t, 0) + k
    return results


def ingest_profile(lake: Lake, run_id: str, captures: Sequence[Capture], run_meta: Optional[RunMeta] = None,
                   allow_missing: bool = False, progress: Optional[Progress] = None,
                   profiler_step: Optional[int] = None, workers: Optional[int] = None,
                   fleet=None) -> IngestResult:
    """Ingest every capture of one run, replacing any earlier ingest of ``run_id``.

    Writes inside :meth:`Lake.writing` (the caller's door, or its own when called alone).

    Args:
        lake: target lake. run_id: validated id (``[A-Za-z0-9._-]+``).
        captures: from :func:`tilake.ingest.profiler.discover.discover` or ``explicit`` (after
            ``dedupe``/``assign_worker_ranks``: duplicates are listed on the kept capture, never summed).
        run_meta: values for the ``runs`` row (model_id, model_family, parallel_config, …);
            anything missing is written ``unknown``/NULL, never guessed (``parallel_config`` comes from
            ``profiler_metadata.json`` when not given).
        allow_missing: record sides without device evidence instead of failing.
        progress: where the per-capture progress goes (:class:`tilake.progress.Progress`; the CLI's bar is
            :func:`tilake.reports.progress_console.ingest_bar`); None or a bool: nowhere.
        profiler_step: count only this profiler step (N of ``ProfilerStep#N``) on every rank with markers.
        workers: captures ingested at once (each its own DuckDB instance; see :func:`_run_captures`);
            None = one per CPU core, at most one per (side, rank).
        fleet: None (threads on this machine), or a Ray fleet
            (:class:`tilake.ingest.profiler.fleet.RayFleet`): one Ray task per capture on the node that
            holds it, into this writer's staging folder; ``fleet.metadata(cap)`` gives the capture's
            ``profiler_metadata.json`` as read on its node. Same rows, same commit.
    Returns:
        :class:`IngestResult`.
    Raises:
        TilakeError: a capture file is not SQLite or is truncated/unreadable; a side has no usable
            evidence and ``allow_missing`` is False; ``profiler_step`` is missing on a rank with step
            markers. The lake is unchanged in every error case.
    """
    result = IngestResult(run_id)
    meta = dict(run_meta or {})
    rows: List[Dict] = []
    with lake.write_run(run_id, schema.PROFILE_TABLES) as w:
        bar = progress_or_null(progress)
        task = bar.add_task(run_id, total=len(captures))
        for cap in captures:
            md = fleet.metadata(cap) if fleet is not None else read_metadata(cap.pt_dir)
            groups = parallel_groups(md)
            rows.append({"capture_id": cap.capture_id, "path": str(cap.path), "source_kind": cap.kind,
                         "profiler_level": cap.level, "rank_source": cap.rank_source, "worker": cap.worker or (cap.role or None),
                         "pid": cap.pid, "device_id": cap.device_id,
                         "duplicates_ignored": json.dumps([str(d.path) for d in cap.duplicates]) if cap.duplicates else None,
                         "parallel_groups": json.dumps(groups) if groups else None})
            if "parallel_config" not in meta and parallel_layout(md):
                meta["parallel_config"] = parallel_layout(md)
        result.captures = (fleet.run(w, captures, rows, bar, task) if fleet is not None
                           else _run_captures(w, captures, rows, bar, task, workers))
        result.notes += restrict_steps(w, result.captures, profiler_step)
        for side in ("train", "infer"):
            n = max((c.capture.workers for c in result.captures if c.capture.side == side), default=0)
            if n > 1:
                result.notes.append(f"{side}: {n} workers merged into the side total (no rank ids; one rank slot each)")
            reps = sorted({c.capture.replica for c in result.captures
                           if c.capture.side == side and c.capture.replica is not None})
            if len(reps) > 1:
                result.notes.append(f"{side}: {len(reps)} inference replicas ({', '.join(map(str, reps))}), "
                                    "counted per replica (each engine repeats rank 0; one rank slot each)")
        for res, row in zip(result.captures, rows):
            reason = "; ".join(x for x in [res.reason, *res.notes, *res.info] if x)
            row.update(status=res.status, reason=reason, kernel_count=res.kernels, host_op_count=res.host_ops,
                       **step_row(res))
            if res.source_kind:
                row["source_kind"] = res.source_kind
            row.setdefault("backend", {"db": "ascend_db", "text": "ascend_text"}.get(row["source_kind"]))
            res.reason = reason
            w.write_rows("captures", [row], {"side": res.capture.side, "rank": res.capture.rank})
        for side in ("train", "infer"):   # the one home of the rule; int_sides_evidenced reads the record
            ev = side_evidence(side, result.captures)
            result.sides[side] = ev
            if ev.missing and not allow_missing:
                raise TilakeError(f"{side} side has no device evidence — {ev.reason}")
        # torch_npu / CANN versions of the capture (profiler_info_*.json), vLLM's of a rollout trace header, where
        # the caller recorded none
        found = versions_from_profiler_info(c.pt_dir for c in captures)
        for c in captures:   # and what a torch trace's header states (vLLM's vllm_version)
            if c.kind == "trace":
                for k, v in trace_versions(c.path).items():
                    found.setdefault(k, v)
        if found:
            tv = dict(meta.get("tool_versions") or {}) if isinstance(meta.get("tool_versions"), dict) else {}
            for k, v in found.items():
                if str(tv.get(k) or "unknown") == "unknown":
                    tv[k] = v
            meta["tool_versions"] = tv
        metrics = meta.pop("_metrics", None) or []
        if metrics:
            w.write_rows("run_metrics", [dict(r, run_id=run_id) for r in metrics])
        meta.setdefault("host", socket.gethostname())
        meta.setdefault("rules", rules_run_record(lake.root))  # user rules in force (tilake.lake.rules)
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
