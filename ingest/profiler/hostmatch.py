"""Kernel → host op when the DB has no host links (issue #12 item 4).

Some captures have an empty ``CONNECTION_IDS`` table and ``TASK.connectionId`` NULL (the parser logged
"Failed to get acl to npu flow events", vllm-ascend #1210). Device time is no help: on the real
level-1/2 fixture DBs (``../shared/fixtures/profiler/msinsight/test/data/pytorch/db/level{1,2}``) not
one of 187 kernels starts inside its host op's interval (median lag 1.8 ms, the task queue). Order
is: per device stream, kernels run in the order their host ops were called (0 inversions there).

Notes (:func:`match_by_order`):

1. Host candidates are the innermost framework ops of each thread (``aclnnMuls`` inside
   ``aten::mul``): an op whose next op on the thread starts after it ends.
2. Per stream, kernels in start order walk forward through the candidates (one pointer per stream;
   a kernel never matches an op that started after it).
3. A kernel whose name starts with a candidate's name (``aclnnMm_MatMulCommon_MatMulV2`` ←
   ``aclnnMm``, ``ReduceSum7`` ← ``ReduceSum``) within the next :data:`WINDOW` candidates is that op's
   (``match_confidence = 'name_order'``); a kernel name already given to the current op starts the
   search after it (the next call of the same API).
4. Any other kernel (``trans_TransData_N``) is ``'order'``: it goes to the next name-matched op when
   that op already started and has a CANN op name (``Conv2D``: its helper kernels run before its own
   kernel), else to the previous one; before any match and with no such next op it stays NULL.

Linked kernels from connection ids have ``match_confidence = 'connection'``. On the real level-2
DB with its links removed, 124 kernels match by name (all agree with the connection ids) and 63 by
order alone (37 agree): 161 of 187; the share is asserted
in ``tests/ingest/profiler/test_profiler_host_links.py``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

from tilake.lake.duck import sql_str

WINDOW = 64
"""How many host candidates ahead a kernel's name is searched for (ops that launch no kernel are skipped)."""


def links_missing(con, task_file: Path) -> bool:
    """True when tasks and host ops exist but no task carries a usable connection id or ``conn_host``
    is empty."""
    tasks, linked = con.execute(f"SELECT count(*), count(*) FILTER (WHERE connectionId IS NOT NULL AND "
                                f"connectionId <> 4294967295) FROM read_parquet({sql_str(task_file)}, hive_partitioning=false)").fetchone()
    hosts = con.execute("SELECT count(*) FROM hops").fetchone()[0]
    mapped = con.execute("SELECT count(*) FROM conn_host").fetchone()[0]
    return tasks > 0 and hosts > 0 and (linked == 0 or mapped == 0)


def _walk(seq: List[tuple], hosts: List[tuple]) -> List[tuple]:
    """Notes 2–4 for the kernels of one stream (``(gid, stream, start, name)`` in start order)."""
    n = len(hosts)
    ptr, cur, given = 0, None, set()
    named: List[object] = []  # host index per kernel, or None
    for _gid, _st, start, kname in seq:
        kname = kname or ""
        lo = ptr + 1 if (cur is not None and kname in given) else ptr
        found = None
        for i in range(lo, min(lo + WINDOW, n)):
            if hosts[i][1] > start:
                break
            if len(hosts[i][2] or "") >= 3 and kname.startswith(hosts[i][2]):
                found = i
                break
        if found is not None:
            if found != cur:
                given = set()
            ptr = cur = found
            given.add(kname)
        named.append(found)
    out = []
    prev = None
    for idx, (gid, _st, start, _k) in enumerate(seq):
        if named[idx] is not None:
            prev = named[idx]
            out.append((gid, hosts[prev][0], "name_order"))
            continue
        nxt = next((named[j] for j in range(idx + 1, min(idx + 1 + WINDOW, len(seq))) if named[j] is not None), None)
        # helper kernels (trans_TransData_N) of a CANN-named op (Conv2D…) run before its own kernel;
        # those of an aclnn API carry its name, so an unnamed kernel before one belongs to the op before
        use_next = nxt is not None and hosts[nxt][1] <= start and not (hosts[nxt][2] or "").startswith("aclnn")
        pick = nxt if use_next or prev is None else prev
        if pick is not None and hosts[pick][1] <= start:
            out.append((gid, hosts[pick][0], "order"))
    return out


def match_by_order(con, task_file: Path, cti_file: Path) -> int:
    """Build temp table ``order_host(global_task_id, host_op_id, match_confidence)``; returns kernels matched.

    Reads temp tables ``hops`` and ``ksid`` and the dumped TASK / COMPUTE_TASK_INFO Parquet files.
    Python walks the kernels once (this path runs only for captures without links).
    """
    hosts = con.execute("""
        SELECT host_op_id, start_ns, name FROM (
            SELECT *, lead(start_ns) OVER (PARTITION BY global_tid ORDER BY start_ns, end_ns DESC, host_op_id) AS nxt
            FROM hops WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL)
        WHERE nxt IS NULL OR nxt >= end_ns OR NOT contains(coalesce(name, '::'), '::')
        ORDER BY start_ns, host_op_id""").fetchall()
    kernels = con.execute(f"""
        SELECT t.globalTaskId, t.streamId, t.startNs, j.value
        FROM read_parquet({sql_str(task_file)}, hive_partitioning=false) t
        JOIN read_parquet({sql_str(cti_file)}, hive_partitioning=false) c USING (globalTaskId)
        LEFT JOIN ksid j ON j.id = c.c_kernel_name
        WHERE t.startNs IS NOT NULL
        ORDER BY t.streamId, t.startNs, t.globalTaskId""").fetchall()
    out: List[tuple] = []
    by_stream: Dict[object, list] = {}
    for k in kernels:
        by_stream.setdefault(k[1], []).append(k)
    for seq in by_stream.values():
        out.extend(_walk(seq, hosts))
    if not out:
        con.execute("CREATE OR REPLACE TEMP TABLE order_host (global_task_id BIGINT, host_op_id BIGINT, "
                    "match_confidence VARCHAR)")
        return 0
    csv_path = Path(task_file).parent / "order_host.csv"
    with open(csv_path, "w", encoding="utf-8") as f:
        f.writelines(f"{g},{h},{c}\n" for g, h, c in out)
    con.execute(f"CREATE OR REPLACE TEMP TABLE order_host AS SELECT * FROM read_csv({sql_str(csv_path)}, header=false, "
                "columns={'global_task_id': 'BIGINT', 'host_op_id': 'BIGINT', 'match_confidence': 'VARCHAR'})")
    return len(out)
