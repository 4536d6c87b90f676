"""The kernel path of a torch_npu profiler DB: device kernels into the lake's ``kernels`` table.

Format facts (``reference/ascend-profiler-format.md`` §2.2–2.6; torch_npu ``_fwk_api_db_parser.py``;
msprof ``msprof_db.cpp``): kernels are ``TASK ⋈ COMPUTE_TASK_INFO`` on ``globalTaskId`` (TASK also
holds memcpy/event rows that are not kernels) plus one row per ``COMMUNICATION_OP`` (HCCL op, op
type ``hcom_*_``); every name-like INTEGER column is an id into ``STRING_IDS(id, value)``;
``4294967295`` (msprof ``DB_INVALID_VALUE``) means "no connection".

Steps (:func:`write_kernels`): dump the three tables side by side to private Parquet files
(:func:`_parallel_copy`), cut the keys into ranges (:func:`_chunk_bounds`), join each range with the
host ops and decoded strings, then append the HCCL ops. Called by
:func:`tilake.ingest.profiler.db.load_db` with the SQLite file attached as ``s``, the decoded strings
in the temp table ``sid`` and the task-connection → host-op map in ``conn_host``.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Dict, List

from tilake.errors import TilakeError
from tilake.ingest.profiler.decode import ENUM_COLUMNS, KernelStrings
from tilake.ingest.profiler.hostmatch import links_missing, match_by_order
from tilake.ingest.profiler.rows import dedupe_dump, end_bound, span_columns, span_ok, span_problem, timing_counts
from tilake.lake.duck import memory_limit_bytes, sql_str

INVALID = 4294967295
"""msprof/torch_npu ``DB_INVALID_VALUE``: an id column that points nowhere."""


def sid_join(pr, table: str, col: str, src: str, alias: str, only_used: bool = False) -> tuple:
    """Decode ``src.col`` (a STRING_IDS key) with a LEFT JOIN on the in-memory ``sid`` copy.

    ``pr`` is the file's :class:`tilake.ingest.profiler.db.DbProbe`. Returns ``(join clause, alias)``;
    ``("", None)`` when the column is absent. Read ``alias.value`` / ``.clean`` / ``.derived`` (see
    :func:`tilake.ingest.profiler.db.load_db`). Joins, never correlated scalar subqueries: those cost
    ~28× on large tables (bench/README.md). ``only_used`` (small tables such as COMMUNICATION_OP):
    hash only the strings the column uses, not all of STRING_IDS (millions of rows in big captures).
    """
    if not pr.has(table, col):
        return "", None
    target = f'(SELECT * FROM sid WHERE id IN (SELECT "{col}" FROM s."{table}"))' if only_used else "sid"
    return f'LEFT JOIN {target} {alias} ON {alias}.id = {src}."{col}"', alias


def sid_value(alias: "str | None", field: str = "value") -> str:
    """``alias.field`` of a :func:`sid_join`, or NULL when the column was absent."""
    return f"{alias}.{field}" if alias else "NULL"


KERNEL_CHUNK_ROWS = 2_000_000
"""Most COMPUTE_TASK_INFO rows per TASK ⋈ COMPUTE_TASK_INFO hash join (its table then fits in memory)."""

KERNEL_ROW_BYTES = 256
"""Memory budget per kernel row of one join range: a range holds at most (free memory) / this many rows."""


def chunk_rows(con) -> int:
    """Rows per join range for ``con``: :data:`KERNEL_CHUNK_ROWS`, fewer when the free part of the memory
    limit (the limit minus what in-memory tables hold, at least an eighth of it) is small; at least 50,000.

    BR-22 (4 M kernels, 2 M unrelated STRING_IDS rows whose decoded copy holds 185 MiB): one 2 M-row range
    failed with 'failed to pin block' under a 244 MiB limit; a plain 2 M-row capture fits one range in
    512 MiB (one range is 0.1 s faster than two: bench/README.md).
    """
    limit = memory_limit_bytes(con)
    if limit is None:
        return KERNEL_CHUNK_ROWS
    held = con.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                       "WHERE tag = 'IN_MEMORY_TABLE'").fetchone()[0]
    free = max(limit - int(held), limit // 8)
    return min(KERNEL_CHUNK_ROWS, max(50_000, free // KERNEL_ROW_BYTES))


def _parallel_copy(con, queries: Dict[str, str], folder: Path) -> Dict[str, Path]:
    """``COPY (query) TO folder/<key>.parquet`` for every query at once, one DuckDB cursor per thread.

    DuckDB's SQLite scanner reads one table on about one core (measured: a bare ``COPY`` of TASK then
    COMPUTE_TASK_INFO used 19 CPU-s in 18.7 s wall), so dumping the tables side by side uses the
    other cores. The cursors share the database instance (the attached SQLite file ``s``, settings).

    Raises:
        the first error of any thread; TilakeError on Ctrl-C (the scans are interrupted first).
    """
    import threading

    out = {k: folder / f"{k}.parquet" for k in queries}
    errors: List[BaseException] = []
    cursors = {k: con.cursor() for k in queries}

    def run(key: str) -> None:
        try:
            cursors[key].execute(f"COPY ({queries[key]}) TO {sql_str(out[key])} "
                                 "(FORMAT parquet, COMPRESSION uncompressed)")
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,), name=f"tilake-dump-{k}") for k in queries]
    # the dumps are joined by key, never read in file order: without insertion order DuckDB scans one
    # SQLite table on every core (COMPUTE_TASK_INFO, 2 M rows, 11 columns: 1.32 s → 0.58 s; bench/README.md)
    con.execute("SET preserve_insertion_order = false")
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)
    except BaseException as exc:
        # Ctrl-C (or any error) in the caller: stop the other scans before the staging folder goes
        for cur in cursors.values():
            cur.interrupt()
        for t in threads:
            t.join()
        if isinstance(exc, KeyboardInterrupt):
            raise TilakeError("interrupted by the user; the lake is unchanged") from exc
        raise
    finally:
        for cur in cursors.values():
            cur.close()
        con.execute("RESET preserve_insertion_order")
    if errors:
        raise errors[0]
    return out


def _chunk_bounds(con, cti: Path, rows: int) -> List[tuple]:
    """Half-open ``globalTaskId`` ranges of about :data:`KERNEL_CHUNK_ROWS` COMPUTE_TASK_INFO rows each
    (approximate quantiles of the dumped keys); ``[(None, None)]`` for one chunk."""
    k = max(1, -(-rows // chunk_rows(con)))
    if k == 1:
        return [(None, None)]
    qs = ", ".join(str(i / k) for i in range(1, k))
    cuts = con.execute(f"SELECT list_sort(list_distinct(approx_quantile(globalTaskId, [{qs}]))) "
                       f"FROM read_parquet({sql_str(cti)}, hive_partitioning=false)").fetchone()[0] or []
    edges = [None, *cuts, None]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def write_kernels(con, pr, writer, partition: Dict, capture_id: str, invalid: Dict[str, int],
                  shown: Path, notes: List[str], say=lambda text: None) -> tuple:
    """Write compute kernels then HCCL ops; returns (compute kernel rows, all kernel rows).

    Rows kept but counted (:mod:`.rows`) are added to ``invalid`` (``{problem: rows}``): repeated
    TASK/COMPUTE_TASK_INFO rows, kernels whose time is invalid (their times are written NULL).
    ``shown`` is the input path named in errors (``pr``'s file may be a private WAL copy). Without
    host links (:mod:`.hostmatch`) kernels are matched to host ops by order and name, and a line
    saying so is appended to ``notes`` (once per capture).

    Compute kernels: TASK, COMPUTE_TASK_INFO (and CANN_API) are first dumped side by side to private
    Parquet files in the staging folder (:func:`_parallel_copy`), then joined on ``globalTaskId`` in
    ranges of about :data:`KERNEL_CHUNK_ROWS` rows, so each hash table fits in memory instead of
    spilling (10 M + 10 M rows: 13.6 s and 474 MiB vs 26.5 s and 858 MiB for one join streamed from
    the scanner; bench/README.md). Strings are decoded with plain LEFT JOINs on the in-memory ``sid``
    copy of STRING_IDS; the CANN API name comes from CANN_API by connection id. One Parquet file per
    range.
    """
    n = 0
    cid = sql_str(capture_id)
    bound = end_bound(pr.session)   # a kernel ending after the session (+1 s) or longer than 1 h is invalid
    has_cann = pr.has("CANN_API")
    cann_val = "j_cann.value" if has_cann else "NULL"
    if pr.has("COMPUTE_TASK_INFO") and pr.has("TASK"):
        cti = {c: (f'c."{c}"' if pr.has("COMPUTE_TASK_INFO", c) else "NULL")
               for c in ("name", "opType", "taskType", "inputShapes", "inputDataTypes", "inputFormats",
                         "outputShapes", "outputDataTypes", "outputFormats", "hf32Eligible")}
        blk = f'c."{pr.block_column}"' if pr.block_column else "NULL"
        strings = {"kernel_name": "name", "raw_op": "opType", "accel": "taskType", "i_sh": "inputShapes",
                   "i_dt": "inputDataTypes", "i_fm": "inputFormats", "o_sh": "outputShapes",
                   "o_dt": "outputDataTypes", "o_fm": "outputFormats",
                   # hf32Eligible: STRING_IDS key of 'YES'/'NO'/'N/A' (COMPUTE_TASK_INFO since 2025-06-20,
                   # reference doc §2.5); NULL in older DBs
                   "hf32": "hf32Eligible"}
        base_cols = ", ".join(f"{cti[col]} AS c_{a}" for a, col in strings.items())
        dump = writer.staging / f"_dump_{capture_id}"
        dump.mkdir(parents=True, exist_ok=True)
        dec = KernelStrings()
        try:
            queries = {
                "task": ("SELECT t.globalTaskId, t.deviceId, t.streamId, t.taskId, t.startNs, t.endNs, "
                         "t.taskType AS t_tt, t.connectionId FROM s.TASK t"),
                "cti": f"SELECT c.globalTaskId, {blk} AS block_dim, {base_cols} FROM s.COMPUTE_TASK_INFO c",
            }
            if has_cann:
                queries["cann"] = "SELECT connectionId, name FROM s.CANN_API"
            say(" · ".join(f"reading {t} ({pr.rows.get(t, 0):,} rows)" for t in
                           ("TASK", "COMPUTE_TASK_INFO", *(["CANN_API"] if has_cann else []))))
            files = _parallel_copy(con, queries, dump)
            for key, table in (("cti", "COMPUTE_TASK_INFO"), ("task", "TASK")):
                # a globalTaskId PRIMARY KEY (real COMPUTE_TASK_INFO DDL) cannot repeat: no check needed
                dropped = 0 if pr.unique(table, "globalTaskId") else dedupe_dump(con, files[key], table, shown)
                if dropped:
                    invalid[f"{table} repeated rows (kept once)"] = dropped
            invalid.update(timing_counts(con, files["task"], files["cti"], bound))
            dec.build(con, files)
            invalid.update(dec.dangling(con, files))   # names / op types that decode to NULL: counted, said
            j = dec.expr
            by_order = links_missing(con, files["task"])
            if by_order:
                matched = match_by_order(con, files["task"], files["cti"])
                notes.append(f"host links missing (no TASK.connectionId ⋈ CONNECTION_IDS): {matched} kernels "
                             "attributed to host ops by launch order and kernel name (kernels.match_confidence)")
            host_join = ("LEFT JOIN order_host oh ON oh.global_task_id = b.globalTaskId "
                         "LEFT JOIN (SELECT host_op_id AS hid, name, callchain_id FROM hops) h ON h.hid = oh.host_op_id"
                         if by_order else "")
            host_pick = ("h.hid AS host_op_id, h.name AS host_op_name, h.callchain_id, oh.match_confidence"
                         if by_order else "h.host_op_id, h.name AS host_op_name, h.callchain_id, "
                         "CASE WHEN h.host_op_id IS NOT NULL THEN 'connection' END AS match_confidence")
            total = pr.rows.get("COMPUTE_TASK_INFO", 0)
            for lo, hi in _chunk_bounds(con, files["cti"], total):
                say(f"joining kernels: {n:,}/{total:,} rows written")
                rng = " AND ".join([*([f"globalTaskId >= {lo}"] if lo is not None else []),
                                    *([f"globalTaskId < {hi}"] if hi is not None else [])]) or "true"
                # the connection ids of this range's tasks bound the CANN_API / host-op rows joined to it
                cmin, cmax = con.execute(
                    f"SELECT min(connectionId), max(connectionId) FROM read_parquet({sql_str(files['task'])}, hive_partitioning=false) "
                    f"WHERE {rng} AND connectionId <> CAST({INVALID} AS BIGINT)").fetchone()
                conn_rng = (f"BETWEEN {int(cmin)} AND {int(cmax)}" if cmin is not None else "IS NULL")
                host_link = host_join or (f"LEFT JOIN (SELECT * FROM conn_host WHERE task_conn {conn_rng}) h "
                                          "ON h.task_conn = b.connectionId")
                cann_join = (f"LEFT JOIN (SELECT connectionId, name FROM read_parquet({sql_str(files['cann'])}, hive_partitioning=false) "
                             f"WHERE connectionId {conn_rng}) ca "
                             "ON ca.connectionId = b.connectionId LEFT JOIN sid j_cann ON j_cann.id = ca.name"
                             if has_cann else "")
                sql = f"""
                    WITH b AS (
                        SELECT t.*, c.* EXCLUDE (globalTaskId)
                        FROM (SELECT * FROM read_parquet({sql_str(files['cti'])}, hive_partitioning=false) WHERE {rng}) c
                        JOIN (SELECT * FROM read_parquet({sql_str(files['task'])}, hive_partitioning=false) WHERE {rng}) t
                          ON t.globalTaskId = c.globalTaskId
                    ), k AS (
                        SELECT b.*, {j['kernel_name.v']} AS kernel_name,
                               coalesce({j['raw_op.op']}, {j['kernel_name.derived']}) AS op_type,
                               {j['raw_op.op']} IS NULL AS op_type_derived, {j['accel.v']} AS accelerator,
                               {j['tt.v']} AS device_task_type, {j['i_sh.v']} AS input_shapes,
                               {j['i_dt.v']} AS input_dtypes, {j['i_fm.v']} AS input_formats,
                               {j['o_sh.v']} AS output_shapes, {j['o_dt.v']} AS output_dtypes,
                               {j['o_fm.v']} AS output_formats, {j['hf32.v']} AS hf32_eligible,
                               {cann_val} AS cann_api_name, {host_pick}
                        FROM b
                        {dec.joins}
                        {cann_join}
                        {host_link}
                    )
                    SELECT CAST({cid} AS ENUM({cid})) AS capture_id, CAST('db' AS ENUM('db')) AS source_kind,
                           globalTaskId AS global_task_id, deviceId AS device_id, streamId AS stream_id,
                           taskId AS task_id, {span_columns('startNs', 'endNs', bound)},
                           kernel_name, op_type, op_type_derived, accelerator, device_task_type, block_dim,
                           input_shapes, input_dtypes, input_formats, output_shapes, output_dtypes, output_formats,
                           NULLIF(connectionId, CAST({INVALID} AS BIGINT)) AS connection_id, cann_api_name,
                           host_op_id, host_op_name, callchain_id, 1 AS call_count, NULL AS step, match_confidence,
                           hf32_eligible
                    FROM k"""
                n += writer.copy_query("kernels", sql, partition, strings=ENUM_COLUMNS)
        finally:
            dec.drop(con)
            shutil.rmtree(dump, ignore_errors=True)
    compute = n
    if pr.has("COMMUNICATION_OP"):
        say(f"{n:,} kernels written; reading COMMUNICATION_OP ({pr.rows.get('COMMUNICATION_OP', 0):,} rows)")
        jn, nm = sid_join(pr, "COMMUNICATION_OP", "opName", "o", "jn", only_used=True)
        jt, ot = sid_join(pr, "COMMUNICATION_OP", "opType", "o", "jt", only_used=True)
        dev = "o.deviceId" if pr.has("COMMUNICATION_OP", "deviceId") else "NULL"
        # 4294967295 means "no connection": never join it (the compute path bounds ids the same way)
        cann_join_o = ("LEFT JOIN s.CANN_API ca ON ca.connectionId = o.connectionId "
                       f"AND o.connectionId <> CAST({INVALID} AS BIGINT) "
                       "LEFT JOIN sid j_cann ON j_cann.id = ca.name") if has_cann else ""
        sql = f"""
            SELECT {cid} AS capture_id, 'db' AS source_kind, NULL AS global_task_id, {dev} AS device_id,
                   NULL AS stream_id, NULL AS task_id, {span_columns('o.startNs', 'o.endNs', bound)},
                   {sid_value(nm)} AS kernel_name,
                   CASE WHEN {sid_value(ot, 'clean')} IS NULL THEN {sid_value(nm, 'derived')} ELSE {sid_value(ot)} END AS op_type,
                   {sid_value(ot, 'clean')} IS NULL AS op_type_derived,
                   'COMMUNICATION' AS accelerator, 'HCCL' AS device_task_type, NULL AS block_dim,
                   NULL AS input_shapes, NULL AS input_dtypes, NULL AS input_formats,
                   NULL AS output_shapes, NULL AS output_dtypes, NULL AS output_formats,
                   NULLIF(o.connectionId, CAST({INVALID} AS BIGINT)) AS connection_id, {cann_val} AS cann_api_name,
                   h.host_op_id, h.name AS host_op_name, h.callchain_id, 1 AS call_count, NULL AS step,
                   CASE WHEN h.host_op_id IS NOT NULL THEN 'connection' END AS match_confidence,
                   NULL AS hf32_eligible
            FROM s.COMMUNICATION_OP o {jn} {jt} {cann_join_o}
            LEFT JOIN conn_host h ON h.task_conn = o.connectionId"""
        n += writer.copy_query("kernels", sql, partition)
        prob = span_problem("o.startNs", "o.endNs", "COMMUNICATION_OP", bound)
        for p, k in con.execute(f"SELECT {prob} AS p, count(*) FROM s.COMMUNICATION_OP o "
                                f"WHERE NOT {span_ok('o.startNs', 'o.endNs', bound)} GROUP BY p").fetchall():
            invalid[p] = int(k)
    return compute, n
