"""Ingest one PyTorch-profiler Chrome trace into the lake's raw tables (``source_kind='trace'``).

Where verl writes traces (``global_profiler.tool=torch``; verl ``docs/perf/torch_profiling.md`` and
``verl/utils/profiler/torch_profile.py``): ``<global_profiler.save_path>/[<role>/]`` then
``[<prefix>_]prof_rank-<rank>.json.gz`` written by ``prof.export_chrome_trace``; ``role`` is the
``DistProfiler.annotate`` role in discrete mode (``actor_update``, ``ref_compute_log_prob``,
``rollout_generate`` …). vLLM rollout traces go to ``$VLLM_TORCH_PROFILER_DIR`` as
``<worker>.<ts>.pt.trace.json[.gz]`` (``tensorboard_trace_handler``). Finding them is
:mod:`tilake.ingest.torch.find`; reading one is here.

Two readers give the same staged tables: the fast one cuts the ``traceEvents`` array into part files
(:mod:`tilake.ingest.torch.parts`) that DuckDB's JSON reader stages to Parquet a batch at a time (:mod:`tilake.ingest.torch.stage`);
the streaming reference reader (:func:`tilake.ingest.torch.events.stream_events`: ``ijson`` → CSV) takes every
file the fast one refuses (a damaged or truncated stream, a value DuckDB will not cast, a time past 2**62 ns) and
so names what is wrong. tests/ingest/torch/test_trace_stage.py checks they write the same rows.

Tables written (same columns as the Ascend readers):

* ``kernels``: one row per device kernel (``cat: kernel``; ``accelerator='GPU'``), linked to the
  launching CPU op by :func:`_link_kernels` (External id, else correlation → runtime launch event → its
  External id or the innermost enclosing ``cpu_op``; graph replays and orphans labelled), the link kind in
  ``match_confidence`` (:data:`LINK_KINDS`), ``op_type`` = that op's name (e.g. ``aten::mm``; the kernel
  name when unlinked or replayed from a graph, ``op_type_derived``), ``connection_id`` = ``correlation``,
  ``cann_api_name`` = the launching runtime call (``cudaLaunchKernel``, ``hipGraphLaunch`` …), ``step`` from
  the ``ProfilerStep#N`` range holding the launch (:mod:`tilake.ingest.profiler.steps`, fed by the temp
  table ``_launch``). ``gpu_memcpy``/``gpu_memset`` are kept apart: counted in the capture's
  ``table_rows``, not written as kernels (the Ascend readers likewise skip TASK memcpy rows). A trace with *no* device events (CPU-only run) writes its innermost CPU ops (no
  ``cpu_op`` of another dispatcher op nested inside but helper copies, :mod:`tilake.ingest.torch.cpu_ops`) as the evidence, labelled ``accelerator='CPU'``,
  ``device_task_type='cpu_op'`` and ``schema_variant`` ``…+cpu_only``;
* ``host_ops``: every ``cpu_op`` (``Input Dims``/``Input type`` as JSON lists when recorded);
* ``call_stacks``: when ``with_stack``, the ``python_function`` chain of each op's innermost
  enclosing Python frame (depth 0 = innermost), walked by ``Python parent id``;
* ``mstx_ranges``: CPU ``user_annotation`` ranges (``record_function``, verl role ranges) and
  ``ProfilerStep#N`` steps.
"""
from __future__ import annotations

import copy
import json
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Tuple

import duckdb

from tilake.errors import TilakeError
from tilake.ingest.torch.cpu_ops import cpu_evidence_ops
from tilake.ingest.torch.events import (
    KNOWN_SCHEMA_VERSIONS,
    TraceScan,
    TruncatedTrace,
    merge_header,
    read_header,
    stream_events,
)
from tilake.ingest.torch.parts import split_events
from tilake.ingest.torch.stage import StagedViews, Stager, drop_views, load_csvs
from tilake.lake.duck import sql_str
from tilake.vocab import CaptureStatus, Evidence

BACKEND = "torch_trace"
# how a kernel was linked to its launching CPU op (kernels.match_confidence of a torch trace)
LINK_KINDS = {
    "external_id": "the kernel's External id names a cpu_op",
    "launch_external_id": "correlation id → runtime launch event whose External id names a cpu_op",
    "launch_enclosing": "correlation id → runtime launch event → innermost cpu_op on its thread holding it",
    "graph_replay": "replayed from a CUDA/HIP graph (correlation id → cudaGraphLaunch/hipGraphLaunch)",
    "orphan": "no launch event and ran before the first cpu_op (before the CPU window)",
    "unlinked": "no launching op found",
}
GRAPH_LAUNCH_RE = r"(?i)graphlaunch"
@dataclass
class TraceResult:
    """Outcome of one trace ingest.

    Attributes:
        status: ``ok`` (device kernels, or CPU ops of a CPU-only trace) or ``evidence_missing``.
        evidence: ``device`` | ``cpu_ops`` | ``none``. capture: values for the ``captures`` row.
        marks: ``[(N, start_ns, end_ns)]`` of the ``ProfilerStep#N`` CPU ranges (absolute ns).
        links: kernels per link kind (:data:`LINK_KINDS`; ``unlinked`` for none).
    """

    status: str
    reason: str
    kernels: int = 0
    host_ops: int = 0
    evidence: str = "none"
    capture: Dict = field(default_factory=dict)
    marks: List[Tuple[int, int, int]] = field(default_factory=list)
    links: Dict[str, int] = field(default_factory=dict)


def _variant(scan: TraceScan, has_stack: bool) -> str:
    parts = ["chrome_trace_v" + str(scan.header.get("schemaVersion", "none"))]
    parts.append("device" if scan.counts["kernel"] else "cpu_only")
    if scan.header.get("record_shapes"):
        parts.append("shapes")
    if has_stack:
        parts.append("stack")
    return "+".join(parts)


def ingest_trace(path: Path, writer, partition: Dict, capture_id: str, keep_rank: bool = False) -> TraceResult:
    """Read one ``*.json[.gz]`` Chrome trace into ``kernels``, ``host_ops``, ``call_stacks`` and
    ``mstx_ranges`` of the open run ``writer``.

    Args:
        path: the trace file. writer: :class:`tilake.lake.store.RunWriter`.
        partition: ``{"side": …, "rank": …}``; its ``rank`` is set to ``distributedInfo.rank`` when the
            trace has one (wherever the key sits in the object) and ``keep_rank`` is False (a rollout replica's
            rank slot from discovery stays). capture_id: the capture's stable id.
    Returns:
        :class:`TraceResult`; ``capture`` holds ``schema_variant``, ``schema_version``,
        ``table_rows`` (events per category, steps), ``session_*_ns``, ``truncated``, ``backend``.
        A truncated or damaged JSON/gzip stream gives ``evidence_missing`` with ``truncated`` set
        and no rows (the side then fails the ingest unless another capture or ``allow_missing``).
    Raises:
        TilakeError: the file is a JSON object without ``traceEvents``; DuckDB cannot build the
            tables (the caller's lake stays unchanged).
    """
    path = Path(path)
    cap = {"backend": BACKEND, "truncated": False, "schema_version": None,
           "profiler_level": "torch.profiler"}
    try:
        scan = read_header(path)
    except TruncatedTrace as exc:
        return _truncated_result(cap, exc, TraceScan())
    if scan.legacy:
        cap.update(schema_variant="legacy_autograd_array", table_rows="{}")
        return TraceResult(CaptureStatus.EVIDENCE_MISSING,
                           "legacy autograd-profiler trace (a bare JSON array, PyTorch < 1.8.1): no event "
                           "categories and no kernel links; profile again with torch.profiler.profile", capture=cap)
    version = scan.header.get("schemaVersion")
    cap["schema_version"] = None if version is None else str(version)
    folder = writer.staging / f"trace-{uuid.uuid4().hex[:8]}"
    try:
        staged, scan = _stage_fast(writer.con, path, folder, scan)
        if staged is None:   # the reference reader: streams every event, names what is wrong in a bad trace
            try:
                staged = stream_events(path, folder, scan)
            except TruncatedTrace as exc:
                return _truncated_result(cap, exc, scan)
        rank = trace_rank_of(scan)
        # distributedInfo.rank (head or tail of the object) names the partition, except for a rollout replica
        # or relocated capture, whose rank slot discovery gave (each replica's engine repeats rank 0)
        if rank is not None and not keep_rank:
            partition["rank"] = rank
            cap["rank_source"] = "distributedInfo"
        version = scan.header.get("schemaVersion", version)
        cap["schema_version"] = None if version is None else str(version)
        return _write(writer, partition, capture_id, scan, staged, cap, version, path)
    except duckdb.Error as exc:
        if type(exc).__name__ == "InterruptException":
            raise TilakeError("interrupted by the user; the lake is unchanged") from exc
        if "File name too long" in str(exc):   # the lake's staging path is too long: not the trace's fault
            raise
        raise TilakeError(f"cannot build lake tables from the trace ({str(exc).splitlines()[0]})", path=path) from exc
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def trace_rank_of(scan: TraceScan):
    """``distributedInfo.rank`` as an int (torch.profiler writes it for an initialised process group), else None."""
    r = scan.distributed.get("rank")
    return r if isinstance(r, int) and not isinstance(r, bool) and r >= 0 else None


def _truncated_result(cap: Dict, exc: TruncatedTrace, scan: TraceScan) -> TraceResult:
    """A truncated/damaged trace is recorded in capture health (``truncated``, events counted before
    the break) and gives no rows: partial evidence would read as ops missing on one side."""
    rows = dict(sorted(scan.counts.items()))
    rows["steps"] = scan.steps
    cap.update(truncated=exc.kind == "truncated",
               schema_variant={"nonfinite": "chrome_trace_nonfinite", "invalid": "chrome_trace_invalid"}.get(
                   exc.kind, "chrome_trace_truncated"),
               table_rows=json.dumps(rows, separators=(",", ":")))
    return TraceResult(CaptureStatus.EVIDENCE_MISSING, exc.reason, capture=cap)


def _stage_fast(con, path: Path, folder: Path, scan: TraceScan):
    """``(views, scan)`` from the fast read (:func:`tilake.ingest.torch.parts.split_events` →
    :class:`tilake.ingest.torch.stage.Stager`: DuckDB's JSON reader, no Python dict per event), or
    ``(None, scan)`` unchanged when that read does not take the file (the caller streams it instead)."""
    folder.mkdir(parents=True, exist_ok=True)
    stager = Stager(con, folder)
    keys = split_events(path, folder, stager.add)
    if keys is None:
        return None, scan
    trial = copy.deepcopy(scan)
    merge_header(trial, keys)
    views = stager.finish(uuid.uuid4().hex[:8], trial)
    return (views, trial) if views is not None else (None, scan)


SMALL_STAGING_BYTES = 64 << 20
"""Staged CSVs below this size are loaded and joined on one DuckDB thread: faster and ~35 MiB less peak RSS
on the 40 MB V100 trace (1.28 s vs 1.63 s in-process, bench/README.md), where thread start-up and per-thread
buffers outweigh the work; larger traces keep every core (the fast read's Parquet stage is measured the same way)."""


def _write(writer, partition, capture_id, scan: TraceScan, staged, cap, version, trace: Path) -> TraceResult:
    con = writer.con
    threads = con.execute("SELECT current_setting('threads')").fetchone()[0]
    if isinstance(staged, StagedViews):
        size = staged.bytes
    else:
        size = sum(p.stat().st_size for p in staged.values())
    if size < SMALL_STAGING_BYTES:
        con.execute("SET threads = 1")
    try:
        return _write_tables(writer, partition, capture_id, scan, staged, cap, version, trace)
    finally:
        con.execute(f"SET threads = {int(threads)}")


def _write_tables(writer, partition, capture_id, scan: TraceScan, staged, cap, version, trace: Path) -> TraceResult:
    con = writer.con
    # bounded memory for multi-GB traces: DuckDB spills joins and sorts to the run's staging folder
    con.execute("SET memory_limit='600MB'")
    # (a Ray task's writer names a node-local folder of its own: tilake.ingest.profiler.fleet)
    con.execute(f"SET temp_directory={sql_str(getattr(writer, 'spill_dir', None) or writer.staging / 'spill')}")
    if isinstance(staged, StagedViews):
        tag, t = staged.tag, dict(staged.views)
    else:
        tag = uuid.uuid4().hex[:8]
        t = load_csvs(con, staged, tag, trace, scan)
    n_py = con.execute(f'SELECT count(*) FROM "{t["py"]}"').fetchone()[0]
    base = int(scan.header.get("baseTimeNanoseconds") or 0)
    rows = {k: v for k, v in sorted(scan.counts.items())}
    rows["steps"] = scan.steps
    if scan.keys_after_events:
        rows["keys_after_traceEvents"] = len(scan.keys_after_events)
    cap.update(schema_variant=_variant(scan, n_py > 0), table_rows=json.dumps(rows, separators=(",", ":")),
               session_start_ns=None if scan.start_ns is None else base + scan.start_ns,
               session_end_ns=None if scan.end_ns is None else base + scan.end_ns)
    known = scan.counts["cpu_op"] + scan.counts["kernel"]
    if not known:
        seen = ", ".join(f"{k}={v}" for k, v in sorted(scan.counts.items())) or "no events"
        ver = ("" if version in KNOWN_SCHEMA_VERSIONS
               else f"schemaVersion {version!r} is not one tilake knows ({sorted(KNOWN_SCHEMA_VERSIONS)}); ")
        return TraceResult(CaptureStatus.EVIDENCE_MISSING, f"{ver}no cpu_op or kernel events in the trace ({seen})",
                           capture=cap)
    cid = sql_str(capture_id)
    chain = _callchains(writer, partition, cid, t) if n_py else None
    cc = f'LEFT JOIN "{chain}" cc ON cc.idx = o.idx' if chain else ""
    ccol = "cc.callchain_id" if chain else "CAST(NULL AS BIGINT)"
    device = scan.counts["kernel"] > 0
    links: Dict[str, int] = {}
    if device:
        links = _link_kernels(con, t, tag, scan)
        replay = "k.link_kind = 'graph_replay'"
        nk = writer.copy_query("kernels", f"""
            SELECT {cid} AS capture_id, 'trace' AS source_kind, k.idx AS global_task_id,
                   TRY_CAST(d.device AS INTEGER) AS device_id, TRY_CAST(coalesce(d.stream, d.tid) AS INTEGER) AS stream_id,
                   k.corr AS task_id, {base} + k.ts AS start_ns, {base} + k.ts + d.dur AS end_ns, d.dur AS dur_ns,
                   d.name AS kernel_name,
                   CASE WHEN {replay} THEN d.name ELSE coalesce(o.name, d.name) END AS op_type,
                   o.name IS NULL OR {replay} AS op_type_derived,
                   'GPU' AS accelerator, 'kernel' AS device_task_type, NULL AS block_dim,
                   o.dims AS input_shapes, o.types AS input_dtypes, NULL AS input_formats, NULL AS output_shapes,
                   NULL AS output_dtypes, NULL AS output_formats, k.corr AS connection_id, k.api AS cann_api_name,
                   o.idx AS host_op_id, o.name AS host_op_name, {ccol} AS callchain_id, 1 AS call_count, NULL AS step,
                   k.link_kind AS match_confidence, NULL AS hf32_eligible
            FROM "_trace_k_{tag}" k JOIN "{t['device']}" d ON d.idx = k.idx
            LEFT JOIN "{t['ops']}" o ON o.idx = k.op_idx {cc}""", partition)
        kcount = (f'(SELECT op_idx AS host_op_id, count(*) AS n FROM "_trace_k_{tag}" '
                  f"WHERE op_idx IS NOT NULL GROUP BY op_idx)")
        # launch time of each correlation id for the step assignment (steps.assign_steps reads the temp table
        # _launch(conn, t, no_launch)): the runtime call's start, else the linked op's start; orphans and
        # kernels without a launch event or op have no launch time and so no step (no_launch)
        con.execute("DROP TABLE IF EXISTS _launch")
        con.execute(f"""CREATE TEMP TABLE _launch AS
            SELECT k.corr AS conn, min({base} + coalesce(k.rts, o.ts)) AS t, bool_and(k.rts IS NULL AND o.ts IS NULL) AS no_launch
            FROM "_trace_k_{tag}" k LEFT JOIN "{t['ops']}" o ON o.idx = k.op_idx
            WHERE k.corr IS NOT NULL GROUP BY k.corr""")
    else:
        # CPU-only: the ops that would launch a kernel on a device are the evidence (cpu_ops.evidence_ops)
        cpu_evidence_ops(con, t["ops"], f"_trace_leaf_{tag}")
        nk = writer.copy_query("kernels", f"""
            SELECT {cid} AS capture_id, 'trace' AS source_kind, o.idx AS global_task_id, NULL AS device_id,
                   NULL AS stream_id, o.ext_id AS task_id, {base} + o.ts AS start_ns, {base} + o.ts + o.dur AS end_ns,
                   o.dur AS dur_ns, o.name AS kernel_name, o.name AS op_type, false AS op_type_derived,
                   'CPU' AS accelerator, 'cpu_op' AS device_task_type, NULL AS block_dim,
                   o.dims AS input_shapes, o.types AS input_dtypes, NULL AS input_formats, NULL AS output_shapes,
                   NULL AS output_dtypes, NULL AS output_formats, o.ext_id AS connection_id, NULL AS cann_api_name,
                   o.idx AS host_op_id, o.name AS host_op_name, {ccol} AS callchain_id, 1 AS call_count, NULL AS step,
                   NULL AS match_confidence, NULL AS hf32_eligible
            FROM "{t['ops']}" o JOIN "_trace_leaf_{tag}" l ON l.idx = o.idx {cc}""", partition)
        kcount = f'(SELECT idx AS host_op_id, 1 AS n FROM "_trace_leaf_{tag}")'
    nh = writer.copy_query("host_ops", f"""
        SELECT {cid} AS capture_id, 'trace' AS source_kind, o.idx AS host_op_id, o.name AS name,
               {base} + o.ts AS start_ns, {base} + o.ts + o.dur AS end_ns, TRY_CAST(o.tid AS BIGINT) AS global_tid,
               o.ext_id AS connection_id, o.seq AS sequence_number, o.dims AS input_shapes,
               o.types AS input_dtypes, {ccol} AS callchain_id, coalesce(kc.n, 0) AS kernel_count, 1 AS call_count
        FROM "{t['ops']}" o LEFT JOIN {kcount} kc ON kc.host_op_id = o.idx {cc}""", partition)
    writer.copy_query("mstx_ranges", f"""
        SELECT {cid} AS capture_id, name AS message, {base} + ts AS start_ns, {base} + ts + dur AS end_ns,
               TRY_CAST(tid AS BIGINT) AS global_tid
        FROM "{t['ranges']}" WHERE cat = 'user_annotation'""", partition)
    marks = [(int(n), base + a, base + b) for n, a, b in con.execute(
        f"""SELECT TRY_CAST(regexp_extract(name, '^ProfilerStep#([0-9]+)$', 1) AS BIGINT) AS n, min(ts), max(ts + dur)
            FROM "{t['ranges']}" WHERE cat = 'user_annotation' AND name LIKE 'ProfilerStep#%' AND ts IS NOT NULL
            GROUP BY n HAVING n IS NOT NULL ORDER BY n""").fetchall()]
    if isinstance(staged, StagedViews):
        drop_views(con, staged)
    tables = [] if isinstance(staged, StagedViews) else list(t.values())
    for name in tables + [f"_trace_k_{tag}", f"_trace_leaf_{tag}"] + ([chain] if chain else []):
        con.execute(f'DROP TABLE IF EXISTS "{name}"')
    if device:
        return TraceResult(CaptureStatus.OK, f"device kernels (cat kernel) from {scan.counts['kernel']} events; "
                           + link_note(links), nk, nh, Evidence.DEVICE, cap, marks, links)
    return TraceResult(CaptureStatus.OK, "CPU-only trace: no device events (cat kernel/gpu_memcpy/gpu_memset); "
                       f"{nk} innermost CPU ops (cpu_op) are the evidence, not device kernels", nk, nh, Evidence.CPU_OPS,
                       cap,
                       marks)


def _link_kernels(con, t: Dict[str, str], tag: str, scan: TraceScan) -> Dict[str, int]:
    """Temp table ``_trace_k_<tag>``: every kernel's ``idx`` / ``corr`` / ``ts`` (its other columns stay in the
    device table) with ``api`` / ``rts`` / ``rdur`` (its runtime launch event), ``op_idx`` (the launching ``cpu_op``) and ``link_kind`` (:data:`LINK_KINDS`). Returns kernels
    per link kind.

    Order (HolisticTraceAnalysis 0.5 ``trace_parser`` / ``CallGraph``: a kernel's op is the innermost
    ``cpu_op`` enclosing its runtime launch on the launching thread):

    1. the kernel's ``External id`` names a ``cpu_op`` — unless it equals the kernel's ``correlation``:
       2022-era Kineto wrote External id = correlation on kernels and runtime events (checked on the
       A100/V100 HTA test traces), which names no op;
    2. ``correlation`` → the runtime event (``cudaLaunchKernel``, ``hipLaunchKernel``,
       ``hipExtModuleLaunchKernel``, ``cuLaunchKernelEx``, … any ``cuda_runtime``/``cuda_driver`` event);
       a ``*GraphLaunch`` makes the kernel a graph replay; else the runtime event's External id when it
       names a ``cpu_op``; else the innermost ``cpu_op`` on the same pid/tid whose [ts, ts+dur] holds
       the runtime event (an inequality join on thread-offset times, so DuckDB runs it as an IEJoin);
    3. no runtime event and the kernel started before the first ``cpu_op``: an orphan.
    """
    first = f'(SELECT ext_id, min(idx) AS idx FROM "{t["ops"]}" WHERE ext_id IS NOT NULL GROUP BY ext_id)'
    con.execute(f"""CREATE TEMP TABLE "_trace_k0_{tag}" AS
        SELECT d.idx, d.corr, d.ts, r.name AS api, r.ts AS rts, r.dur AS rdur, r.pid AS rpid, r.tid AS rtid,
               CASE WHEN d.ext_id IS DISTINCT FROM d.corr THEN fk.idx END AS k_op,
               CASE WHEN r.ext_id IS DISTINCT FROM r.corr THEN fr.idx END AS r_op,
               regexp_matches(coalesce(r.name, ''), {sql_str(GRAPH_LAUNCH_RE)}) AS replay
        FROM "{t['device']}" d
        LEFT JOIN (SELECT corr, ts, x.ext_id AS ext_id, x.name AS name, x.dur AS dur, x.pid AS pid, x.tid AS tid
                   FROM (SELECT corr, min(ts) AS ts,
                                arg_min({{'ext_id': ext_id, 'name': name, 'dur': dur, 'pid': pid, 'tid': tid}}, ts) AS x
                         FROM "{t['runtime']}" WHERE corr IS NOT NULL GROUP BY corr)) r ON r.corr = d.corr
        LEFT JOIN {first} fk ON fk.ext_id = d.ext_id
        LEFT JOIN {first} fr ON fr.ext_id = r.ext_id
        WHERE d.cat = 'kernel'""")
    # runtime events still without an op: innermost enclosing cpu_op on the same thread. Times are offset
    # per thread (g * span) so that "o starts before and ends after r" can only hold on r's own thread
    con.execute(f"""CREATE TEMP TABLE "_trace_need_{tag}" AS
        SELECT DISTINCT corr, rpid AS pid, rtid AS tid, rts AS ts, rts + coalesce(rdur, 0) AS e
        FROM "_trace_k0_{tag}" WHERE k_op IS NULL AND r_op IS NULL AND rts IS NOT NULL""")
    lo, hi = con.execute(f"""SELECT least((SELECT min(ts) FROM "{t['ops']}"), (SELECT min(ts) FROM "_trace_need_{tag}")),
        greatest((SELECT max(ts + dur) FROM "{t['ops']}"), (SELECT max(e) FROM "_trace_need_{tag}"))""").fetchone()
    enc = f"_trace_enc_{tag}"
    if lo is not None and hi is not None:
        span = int(hi - lo) + 1
        con.execute(f"""CREATE TEMP TABLE "_trace_thr_{tag}" AS
            SELECT pid, tid, row_number() OVER (ORDER BY pid, tid) AS g FROM (SELECT DISTINCT pid, tid FROM "_trace_need_{tag}")""")
        con.execute(f"""CREATE TEMP TABLE "{enc}" AS
            WITH o AS (SELECT o.idx, h.g * {span} + (o.ts - {lo}) AS a, h.g * {span} + (o.ts + o.dur - {lo}) AS b
                       FROM "{t['ops']}" o JOIN "_trace_thr_{tag}" h ON h.pid IS NOT DISTINCT FROM o.pid
                            AND h.tid IS NOT DISTINCT FROM o.tid WHERE o.ts IS NOT NULL),
                 n AS (SELECT n.corr, h.g * {span} + (n.ts - {lo}) AS a, h.g * {span} + (n.e - {lo}) AS b
                       FROM "_trace_need_{tag}" n JOIN "_trace_thr_{tag}" h ON h.pid IS NOT DISTINCT FROM n.pid
                            AND h.tid IS NOT DISTINCT FROM n.tid)
            SELECT n.corr, first(o.idx ORDER BY o.a DESC, o.b ASC, o.idx DESC) AS idx
            FROM n JOIN o ON o.a <= n.a AND o.b >= n.b GROUP BY n.corr""")
        con.execute(f'DROP TABLE "_trace_thr_{tag}"')
    else:
        con.execute(f'CREATE TEMP TABLE "{enc}" (corr BIGINT, idx BIGINT)')
    cpu0 = "NULL" if scan.cpu_start_ns is None else str(int(scan.cpu_start_ns))
    con.execute(f"""CREATE TEMP TABLE "_trace_k_{tag}" AS
        SELECT k.*, coalesce(k.k_op, k.r_op, e.idx) AS op_idx,
               CASE WHEN k.k_op IS NOT NULL THEN 'external_id'
                    WHEN k.replay THEN 'graph_replay'
                    WHEN k.r_op IS NOT NULL THEN 'launch_external_id'
                    WHEN e.idx IS NOT NULL THEN 'launch_enclosing'
                    WHEN k.api IS NULL AND k.ts < {cpu0} THEN 'orphan' END AS link_kind
        FROM "_trace_k0_{tag}" k LEFT JOIN "{enc}" e ON e.corr = k.corr""")
    for name in (f"_trace_k0_{tag}", f"_trace_need_{tag}", enc):
        con.execute(f'DROP TABLE IF EXISTS "{name}"')
    out = {kind or "unlinked": int(n) for kind, n in con.execute(
        f'SELECT link_kind, count(*) FROM "_trace_k_{tag}" GROUP BY link_kind').fetchall()}
    if out.get("graph_replay"):
        rows = con.execute(f"""SELECT k.api, count(DISTINCT k.corr), count(*), string_agg(DISTINCT o.name, ', ')
            FROM "_trace_k_{tag}" k LEFT JOIN "{t['ops']}" o ON o.idx = k.op_idx
            WHERE k.link_kind = 'graph_replay' GROUP BY k.api ORDER BY count(*) DESC""").fetchall()
        out["_graph_ops"] = "; ".join(
            f"{api} ({launches} launch(es), {n} kernels; enclosing cpu_op: {ops or 'none'})"
            for api, launches, n, ops in rows)
    return out


def link_note(links: Dict[str, int]) -> str:
    """One line on how the kernels were linked to ops (shares of :data:`LINK_KINDS`), for the capture reason."""
    total = sum(v for k, v in links.items() if not k.startswith("_")) or 1

    def part(kind: str, label: str) -> str:
        n = links.get(kind, 0)
        return f"{label} {n} ({100.0 * n / total:.1f} %)"
    s = ("kernel → op links: " + ", ".join(part(k, lab) for k, lab in (
        ("external_id", "External id"), ("launch_external_id", "launch event's External id"),
        ("launch_enclosing", "launch event inside a cpu_op"), ("graph_replay", "graph replay"),
        ("orphan", "orphans (before the CPU window)"), ("unlinked", "unlinked"))))
    if links.get("graph_replay"):
        s += f"; graph replays: {links['_graph_ops']}"
    return s


def _callchains(writer, partition, cid: str, t: Dict[str, str]) -> str:
    """Innermost enclosing ``python_function`` of every op (its ``Python id`` is the callchain id)
    and the ``call_stacks`` rows of each chain. Returns the temp table ``(idx, callchain_id)``.

    Notes:
        1. ``P`` = the Python frame on the op's thread that started last at or before the op (ASOF join);
        2. frames nest properly on one thread, so the innermost frame enclosing the op is ``P`` or one of
           its ancestors: walk ``Python parent id`` up from ``P`` until a frame's span covers the op's;
        3. a chain's frames are that frame and its ancestors, depth 0 = innermost.
    """
    con = writer.con
    name = f"_trace_cc_{uuid.uuid4().hex[:8]}"
    pyu = f"_trace_pyu_{uuid.uuid4().hex[:8]}"
    con.execute(f"""CREATE TEMP TABLE "{pyu}" AS SELECT py_id, any_value(parent_id) AS parent_id,
        any_value(name) AS name, any_value(ts) AS ts, any_value(ts + dur) AS e
        FROM "{t['py']}" WHERE py_id IS NOT NULL GROUP BY py_id""")
    con.execute(f"""CREATE TEMP TABLE "{name}" AS
        WITH RECURSIVE start AS (
            SELECT o.idx, o.ts AS ots, o.ts + o.dur AS oe, p.py_id
            FROM "{t['ops']}" o ASOF JOIN "{t['py']}" p ON o.pid = p.pid AND o.tid = p.tid AND o.ts >= p.ts),
        walk(idx, ots, oe, py_id, n) AS (
            SELECT idx, ots, oe, py_id, 0 FROM start
            UNION ALL
            SELECT w.idx, w.ots, w.oe, f.parent_id, w.n + 1 FROM walk w JOIN "{pyu}" f ON f.py_id = w.py_id
            WHERE NOT (f.ts <= w.ots AND f.e >= w.oe) AND f.parent_id IS NOT NULL AND w.n < 512)
        SELECT w.idx, w.py_id AS callchain_id FROM walk w JOIN "{pyu}" f ON f.py_id = w.py_id
        WHERE f.ts <= w.ots AND f.e >= w.oe""")
    writer.copy_query("call_stacks", f"""
        WITH RECURSIVE chain(callchain_id, depth, py_id) AS (
            SELECT DISTINCT callchain_id, 0, callchain_id FROM "{name}"
            UNION ALL
            SELECT c.callchain_id, c.depth + 1, p.parent_id FROM chain c JOIN "{pyu}" p ON p.py_id = c.py_id
            WHERE p.parent_id IS NOT NULL AND c.depth < 512)
        SELECT {cid} AS capture_id, c.callchain_id, c.depth, p.name AS frame
        FROM chain c JOIN "{pyu}" p ON p.py_id = c.py_id""", partition)
    con.execute(f'DROP TABLE "{pyu}"')
    return name
