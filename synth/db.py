"""Write one synthetic ``ascend_pytorch_profiler_{rank}.db`` with the real torch_npu/msprof schema.

Table set, column order/types and enum contents come from :mod:`synth_ddl` (copied from the real
fixture); rows come from :func:`synth_timeline.build_timeline`. Facts mirrored from real files
(reference doc §0, §2, Traps): CANN strings get STRING_IDS ids from 0, framework strings from
``1<<28``; ``PYTORCH_API.startNs/endNs`` are stored as TEXT; ``PYTORCH_API.inputDtypes`` holds the
*shapes* string and ``inputShapes`` the *dtypes* string (the real swap); COMPUTE_TASK_INFO shapes
are stored with literal double quotes (``"513,1024;1024,4096"``); invalid ids are 4294967295;
TASK holds non-kernel rows (PROFILING_ENABLE/DISABLE, MEMCPY_ASYNC, EVENT_RECORD, HCCL umbrella and
subtasks); at level0 every COMPUTE_TASK_INFO string is ``N/A`` and block dims are 0, and there is
no TASK_PMU_INFO.
"""
from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Union

from tilake.files import atomic_path
from tilake.synth.records import Population
from tilake.synth.tables import (
    BLOCK_COLUMNS,
    ENUMS,
    ENV_VARIABLES_JSON,
    FWK_STRING_BASE,
    INVALID,
    TABLE_ORDER,
    ddl,
    enum_api_type,
)
from tilake.synth.timeline import DEVICE_TASK_TYPE, Timeline, build_timeline

LEVELS = ("level0", "level1", "level2")
DEVICE_TABLE_MODES = ("full", "empty", "no_compute_table")
SESSION_END_MODES = ("ok", "null", "zero")
HCCL_GROUP = "90.91.105.46%enp189s0f0_60000_0_1764403100311975"


class _Strings:
    """STRING_IDS interner for one id range."""

    def __init__(self, base: int):
        self.base = base
        self.ids: Dict[str, int] = {}

    def __call__(self, value: str) -> int:
        got = self.ids.get(value)
        if got is None:
            got = self.ids[value] = self.base + len(self.ids)
        return got

    def rows(self):
        return [(i, v) for v, i in self.ids.items()]


def _quoted(shapes: str) -> str:
    return f'"{shapes}"' if shapes else "N/A"


def _fw_list(value: str) -> str:
    """Framework shapes/dtypes as torch_npu writes them: one entry per input, joined by ``;\\r\\n``."""
    return ";\r\n".join(value.split(";"))


def write_profiler_db(path: Union[str, Path], population: Population, *, rank: int = 0,
                      device_id: Optional[int] = None, level: str = "level1", schema: str = "2025-01",
                      block_columns: str = "blockDim", wal: bool = False, session_end: str = "ok",
                      with_stack: bool = True, with_mstx: Optional[bool] = None, device_tables: str = "full",
                      seed: int = 0, start_ns: Optional[int] = None, host_name: str = "localhost",
                      world_size: int = 1, pid: Optional[int] = None,
                      timeline: Optional[Timeline] = None) -> dict:
    """Write one profiler DB for ``population`` and return what is in it.

    Args:
        path: output file (must not exist; parent is created).
        population: host ops and kernels (:func:`train_population` / :func:`infer_population`).
        rank: rank id (RANK_DEVICE_MAP, file naming by callers).
        device_id: NPU id (default ``rank``).
        level: ``level0`` | ``level1`` | ``level2`` (profiler_level).
        schema: ``2025-01`` (real fixture) | ``8.5`` (opState/hf32Eligible, 5500='communication').
        block_columns: ``blockDim`` | ``blockNum`` | ``block_dim``.
        wal: leave the file in WAL journal mode (header bytes 18–19 = 2) without -wal/-shm files.
        session_end: ``ok`` | ``null`` (endTimeNs NULL) | ``zero`` (endTimeNs 0).
        with_stack: write PYTORCH_CALLCHAINS (off → table absent, callchainId NULL).
        with_mstx: write MSTX_EVENTS phase ranges (default: on for the training side).
        device_tables: ``full`` | ``empty`` (TASK/COMPUTE_TASK_INFO/COMMUNICATION_* created, no rows)
            | ``no_compute_table`` (COMPUTE_TASK_INFO absent; TASK full).
        seed: jitter seed (same seed → byte-identical file).
        start_ns: session start (ns); default fixed, never the wall clock.
        host_name: HOST_INFO.hostName.
        world_size: ranks in the data-parallel group (META_DATA parallel_group_info / HCCL srcRank…).
        pid: process id (``TASK.globalPid``, high half of ``globalTid``); default derived from rank/side.
        timeline: a prebuilt timeline (else built from population/rank/seed/start_ns).
    Returns:
        summary dict: ``path, rank, side, level, schema, block_columns, wal, compute_kernels,
        communication_ops, kernels, host_ops, linked_host_ops, unlinked_kernels, op_type_counts,
        kernel_name_counts, table_rows, probes, session_start_ns, session_end_ns, mstx_ranges``.
    Raises:
        ValueError: unknown variant name; FileExistsError: ``path`` exists.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
    if device_tables not in DEVICE_TABLE_MODES:
        raise ValueError(f"device_tables must be one of {DEVICE_TABLE_MODES}, got {device_tables!r}")
    if session_end not in SESSION_END_MODES:
        raise ValueError(f"session_end must be one of {SESSION_END_MODES}, got {session_end!r}")
    statements = ddl(schema, block_columns)
    path = Path(path)
    if path.exists():
        raise FileExistsError(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    if device_id is None:
        device_id = rank
    if with_mstx is None:
        with_mstx = population.side == "train"
    tl = timeline or build_timeline(population, rank=rank, seed=seed, start_ns=start_ns, pid=pid)
    l0 = level == "level0"
    new = schema != "2025-01"
    cann = _Strings(0)
    fwk = _Strings(FWK_STRING_BASE)
    na = cann("N/A") if l0 else None

    # --- device rows ---------------------------------------------------------------------------
    kernels = sorted(tl.kernels, key=lambda kr: kr.global_task_id)
    task_rows: Dict[int, tuple] = {}
    cti_rows: List[tuple] = []
    pmu_rows: List[tuple] = []
    comm_op_rows: List[tuple] = []
    comm_task_rows: List[tuple] = []
    first_other = [r for r in tl.other_tasks if r[4] == "PROFILING_ENABLE"]
    for r in first_other:
        task_rows[r[3]] = (r[0], r[1], device_id, r[2], r[3], tl.pid, cann(r[4]), INVALID, r[5], r[6], INVALID)
    op_id = 0
    comm_of_conn: Dict[int, tuple] = {}
    for kr in kernels:
        k = kr.kernel
        if k.accelerator == "COMMUNICATION":
            op_id += 1
            comm_of_conn[kr.connection_id] = (op_id, k.name)
            task_rows[kr.global_task_id] = (kr.start_ns, kr.end_ns, device_id, kr.connection_id, kr.global_task_id,
                                            tl.pid, cann("AI_CORE"), INVALID, kr.stream_id, kr.task_id, INVALID)
            name_id = cann(k.name)
            group_id = cann(HCCL_GROUP)
            elems = max(1, k.comm_bytes // 4)
            row = (name_id, kr.start_ns + 1_000, kr.end_ns - 200, kr.connection_id, group_id, op_id, 0, 0, 4,
                   cann("MESH-RING"), elems, cann(k.op_type))
            comm_op_rows.append(row + ((device_id,) if new else ()))
            continue
        task_rows[kr.global_task_id] = (kr.start_ns, kr.end_ns, device_id, kr.connection_id, kr.global_task_id,
                                        tl.pid, cann(DEVICE_TASK_TYPE.get(k.accelerator, "KERNEL_AIVEC")), INVALID,
                                        kr.stream_id, kr.task_id, INVALID)
        blocks = (0, 0) if l0 else (k.block_dim, k.mix_block_dim)
        if l0:
            strs = (na,) * 9
        else:
            strs = (cann(k.accelerator), cann(k.op_type), cann(k.input_formats or "N/A"),
                    cann(k.input_dtypes or "N/A"), cann(_quoted(k.input_shapes)), cann(k.output_formats or "N/A"),
                    cann(k.output_dtypes or "N/A"), cann(_quoted(k.output_shapes)), cann("N/A"))
        name_id = cann(k.name)
        row = (name_id, kr.global_task_id) + blocks[:len(BLOCK_COLUMNS[block_columns])] + strs
        if new:
            if l0:
                row += (na, na)
            else:
                row += (cann("dynamic"), cann("YES" if k.op_type.startswith("MatMul") else "NO"))
        cti_rows.append(row)
        if not l0:
            core = "aic" if k.accelerator in ("AI_CORE", "MIX_AIC") else "aiv"
            dur_us = round((kr.end_ns - kr.start_ns) / 1000 * 0.97, 3)
            pmu_rows.append((kr.global_task_id, cann(f"{core}_total_time"), dur_us))
            pmu_rows.append((kr.global_task_id, cann(f"{core}_total_cycles"), int(dur_us * 1_850)))
    for r in tl.comm_tasks:
        start, end, conn, gtid, dtype, stream, taskid, cname, _ = r
        task_rows[gtid] = (start, end, device_id, conn, gtid, tl.pid, cann(dtype), INVALID, stream, taskid, INVALID)
        opid, opname = comm_of_conn[conn]
        row = (cann(opname), gtid, cann(cname), 0, cann(HCCL_GROUP),
               INVALID if cname != "Notify_Record" else 4294967388, 65535, rank, (rank + 1) % max(1, world_size),
               0, 2_064_384 if cname in ("Memcpy", "Reduce_Inline") else 0, 4 if cname != "Notify_Wait" else 65535,
               1 if world_size > 1 else 0, opid)
        if new:
            row += (1, 18.4 if cname == "Memcpy" else 0)
        comm_task_rows.append(row)
    for r in tl.other_tasks:
        task_rows[r[3]] = (r[0], r[1], device_id, r[2], r[3], tl.pid, cann(r[4]), INVALID, r[5], r[6], INVALID)
    # physical order: by globalTaskId except the attribution probe (see Timeline.task_insert_order)
    order = sorted(task_rows)
    if tl.task_insert_order:
        moved = set(tl.probes.get("three_kernels", {}).get("global_task_ids", []))
        if moved:
            anchor_seq = [g for g in tl.task_insert_order]
            pos = {g: i for i, g in enumerate(anchor_seq)}
            base = [g for g in order if g not in moved]
            out: List[int] = []
            # insert the moved rows (reversed) right after the first kernel that follows them in anchor_seq
            first_moved = min(pos[g] for g in moved)
            after = anchor_seq[first_moved - 1] if first_moved > 0 else None
            for g in base:
                out.append(g)
                if g == after:
                    out.extend(sorted(moved, reverse=True))
            if after is None:
                out = sorted(moved, reverse=True) + out
            order = out

    # --- host rows -------------------------------------------------------------------------------
    api_rows = []
    callchains: List[tuple] = []
    chain_id = 0
    op_rows = 0
    linked = 0
    queue_rows = []
    for r in tl.api_rows:
        start, end, thread, name, typ, pconn, seq, fwd_tid, shapes, dtypes, stack, idx = r
        gt = (tl.pid << 32) | tl.tids[thread]
        if typ == 50002:
            queue_rows.append((str(start), str(end), gt, pconn, fwk(name), None, None, None, None, None, typ))
            continue
        op_rows += 1
        if pconn is not None:
            linked += 1
        cc = None
        if with_stack and stack:
            cc = chain_id
            chain_id += 1
            for depth, frame in enumerate(stack):
                callchains.append((cc, fwk(frame), depth))
        api_rows.append((str(start), str(end), gt, pconn, fwk(name), seq, fwd_tid,
                         fwk(_fw_list(shapes)) if shapes else None,      # inputDtypes ← shapes (real swap)
                         fwk(_fw_list(dtypes)) if dtypes else None,      # inputShapes ← dtypes (real swap)
                         cc, typ))
    cann_rows = []
    for start, end, typ, tid, conn, name in tl.cann_rows:
        cann_rows.append((start, end, typ, (tl.pid << 32) | tid, conn, cann(name)))
        if level == "level2" and name == "launch":
            cann_rows.append((start + 300, end - 300, 5000, (tl.pid << 32) | tid, conn + 2_000_000,
                              cann("KernelLaunch")))
    mstx_rows = []
    if with_mstx:
        dom = cann("default")
        for i, (msg, s, e) in enumerate(tl.phases):
            gt = (tl.pid << 32) | tl.tids["main"]
            mstx_rows.append((s, e, 2, i + 1, 0, cann(msg), gt, gt, dom, INVALID))
    # --- metadata ----------------------------------------------------------------------------------
    meta = [("SCHEMA_VERSION_MICRO", "0"), ("SCHEMA_VERSION_MINOR", "2" if new else "0"),
            ("SCHEMA_VERSION_MAJOR", "1"), ("SCHEMA_VERSION", "1.2.0" if new else "1.0.0"),
            ("ENV_VARIABLES", ENV_VARIABLES_JSON)]
    j = population.job
    if world_size > 1 or population.side == "train":
        meta.append(("distributed_args", json.dumps({
            "tensor_model_parallel_size": j.tp, "pipeline_model_parallel_size": j.pp,
            "data_parallel_size": world_size, "context_parallel_size": 1, "expert_model_parallel_size": j.ep,
            "sequence_parallel": False, "rank": rank, "world_size": world_size})))
        meta.append(("parallel_group_info", json.dumps({HCCL_GROUP: {
            "group_name": "dp", "group_rank": rank, "global_ranks": list(range(world_size))}})))
    session_end_ns = {"ok": tl.end_ns, "null": None, "zero": 0}[session_end]

    # --- write ---------------------------------------------------------------------------------------
    # a hidden temp name beside the target, renamed over it only when complete (files.atomic_path)
    with atomic_path(path, suffix=".partial") as tmp:
        con = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=" + ("WAL" if wal else "DELETE"))
            con.execute("PRAGMA synchronous=OFF")
            con.execute("BEGIN")
            tables = list(TABLE_ORDER)
            if l0:
                tables.remove("TASK_PMU_INFO")
            if not with_stack:
                tables.remove("PYTORCH_CALLCHAINS")
            if not with_mstx:
                tables.remove("MSTX_EVENTS")
            if not comm_op_rows:
                tables = [t for t in tables if t not in ("COMMUNICATION_OP", "COMMUNICATION_TASK_INFO")]
            if device_tables == "no_compute_table":
                tables.remove("COMPUTE_TASK_INFO")
                tables = [t for t in tables if t != "TASK_PMU_INFO"]
            for t in tables:
                con.execute(statements[t])
                if t == "TASK":
                    con.execute(statements["TaskIndex"])
                if t == "COMMUNICATION_TASK_INFO":
                    con.execute(statements["CommunicationTaskIndex"])
            empty_dev = device_tables == "empty"

            def ins(table: str, rows: list) -> None:
                if table in tables and rows:
                    con.executemany(f"INSERT INTO {table} VALUES ({','.join('?' * len(rows[0]))})", rows)

            ins("SESSION_TIME_INFO", [(tl.start_ns, session_end_ns)])
            ins("NPU_INFO", [(device_id, "Ascend910B")])
            ins("HOST_INFO", [(str(3538958389648580163 + rank), host_name)])
            for t, rows in ENUMS.items():
                ins(t, rows)
            ins("ENUM_API_TYPE", enum_api_type(schema))
            if not empty_dev:
                ins("COMPUTE_TASK_INFO", cti_rows)
                ins("TASK", [task_rows[g] for g in order])
                ins("TASK_PMU_INFO", pmu_rows)
                ins("COMMUNICATION_OP", comm_op_rows)
                ins("COMMUNICATION_TASK_INFO", comm_task_rows)
            ins("CANN_API", cann_rows)
            ins("MSTX_EVENTS", mstx_rows)
            ins("META_DATA", meta)
            ins("RANK_DEVICE_MAP", [(rank, device_id)])
            ins("STEP_TIME", [(1, tl.phases[0][1] if tl.phases else tl.start_ns, tl.end_ns - 100_000)])
            ins("PYTORCH_API", queue_rows + api_rows)
            ins("CONNECTION_IDS", tl.connection_ids)
            ins("PYTORCH_CALLCHAINS", callchains)
            ins("STRING_IDS", cann.rows() + fwk.rows())
            con.execute("COMMIT")
        finally:
            con.close()
        for suffix in ("-wal", "-shm"):
            if Path(str(tmp) + suffix).exists():   # the last close checkpoints and removes them
                raise RuntimeError(f"sqlite left {tmp}{suffix} behind")

    compute = 0 if empty_dev or device_tables == "no_compute_table" else len(cti_rows)
    comm = 0 if empty_dev else len(comm_op_rows)
    counts = Counter()
    names = Counter()
    if not empty_dev:
        for kr in kernels:
            if device_tables == "no_compute_table" and kr.kernel.accelerator != "COMMUNICATION":
                continue
            counts[kr.kernel.op_type] += 1
            names[kr.kernel.name] += 1
    table_rows = {"TASK": 0 if empty_dev else len(task_rows), "COMPUTE_TASK_INFO": compute,
                  "COMMUNICATION_OP": comm, "COMMUNICATION_TASK_INFO": 0 if empty_dev else len(comm_task_rows),
                  "TASK_PMU_INFO": 0 if empty_dev or l0 else len(pmu_rows), "CANN_API": len(cann_rows),
                  "PYTORCH_API": len(queue_rows) + len(api_rows), "CONNECTION_IDS": len(tl.connection_ids),
                  "PYTORCH_CALLCHAINS": len(callchains), "MSTX_EVENTS": len(mstx_rows),
                  "STRING_IDS": len(cann.ids) + len(fwk.ids)}
    probes = {}
    for tag, info in tl.probes.items():
        info = dict(info)
        row = info.pop("api_row")
        info["pytorch_api_rowid"] = None if row is None else _rowid_of(tl, row)
        probes[tag] = info
    return {
        "path": str(path), "rank": rank, "device_id": device_id, "side": population.side,
        "backend": population.backend, "level": level, "schema": schema, "block_columns": block_columns,
        "wal": wal, "session_end": session_end, "with_stack": with_stack, "with_mstx": with_mstx,
        "device_tables": device_tables, "compute_kernels": compute, "communication_ops": comm,
        "kernels": compute + comm, "host_ops": op_rows, "linked_host_ops": linked,
        "unlinked_kernels": 0 if empty_dev else sum(1 for kr in kernels if kr.host_row is None
                                                    and (device_tables != "no_compute_table"
                                                         or kr.kernel.accelerator == "COMMUNICATION")),
        "op_type_counts": dict(counts), "kernel_name_counts": dict(names), "table_rows": table_rows,
        "probes": probes, "session_start_ns": tl.start_ns, "session_end_ns": session_end_ns,
        "mstx_ranges": [m for m, _, _ in tl.phases] if with_mstx else [],
    }


def _rowid_of(tl: Timeline, api_index: int) -> int:
    """1-based PYTORCH_API rowid of timeline row ``api_index`` (queue rows are inserted first)."""
    n_queue = sum(1 for r in tl.api_rows if r[4] == 50002)
    n_before = sum(1 for r in tl.api_rows[:api_index] if r[4] != 50002)
    return n_queue + n_before + 1
