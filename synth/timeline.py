"""Lay a :class:`~tilake.synth.records.Population` out on one ns clock.

The timeline is engine-independent (plain tuples with strings); :mod:`synth_db` interns the strings
into STRING_IDS and writes the tables, :mod:`synth_text` writes the CSV exports from the same rows.
Clock model (consistent with the real fixture, reference doc §2.1/§2.4): every host op runs on the
main Python thread (backward ops on the autograd thread); each ACL-level record enqueues one task per
kernel (``Enqueue``, PYTORCH_API type 50002), the task-queue thread dequeues it
(``Dequeue@<name>``) and calls the node-level CANN ``launch`` API (type 10000) whose connectionId the
device TASK row carries; the device runs kernels in order after their launch. ``globalTid`` is
``pid << 32 | tid`` as in real files; all times are integer ns.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from tilake.synth.records import Kernel, Population

#: device task type (TASK.taskType string) per accelerator (COMPUTE_TASK_INFO.taskType), as observed
#: in the real fixture (KERNEL_AICORE / KERNEL_AIVEC / MIX_AIV / STARS_COMMON).
DEVICE_TASK_TYPE = {"AI_CORE": "KERNEL_AICORE", "AI_VECTOR_CORE": "KERNEL_AIVEC", "MIX_AIC": "MIX_AIC",
                    "MIX_AIV": "MIX_AIV", "AI_CPU": "KERNEL_AICPU", "DSA_SQE": "STARS_COMMON"}
DEFAULT_START_NS = 1_764_403_200_000_000_000   # 2025-11-29T08:00:00Z, fixed (no wall clock)
COMPUTE_STREAM, COMM_STREAM, CTRL_STREAM = 2, 4, 0
ROLLOUT_GAP_NS = 2_000_000_000                  # generate_sequences span on the training rank


@dataclass
class KernelRow:
    """One placed device kernel."""
    global_task_id: int
    start_ns: int
    end_ns: int
    connection_id: int
    stream_id: int
    task_id: int
    kernel: Kernel
    op_index: int            # index into Population.ops
    host_row: Optional[int]  # index into Timeline.api_rows of the linked ACL-level record, None if unlinked


@dataclass
class Timeline:
    """All rows of one capture, strings not yet interned. Times in ns."""
    pid: int
    tids: Dict[str, int]
    start_ns: int = 0
    end_ns: int = 0
    # (start, end, thread, name, type, conn_index|None, seq, fwd_tid, shapes, dtypes, stack, op_index)
    api_rows: List[tuple] = field(default_factory=list)
    connection_ids: List[Tuple[int, int]] = field(default_factory=list)
    # (start, end, type, thread, connectionId, name)
    cann_rows: List[tuple] = field(default_factory=list)
    kernels: List[KernelRow] = field(default_factory=list)
    # other TASK rows: (start, end, connectionId, globalTaskId, taskTypeName, streamId, taskId)
    other_tasks: List[tuple] = field(default_factory=list)
    # communication subtasks: (start, end, conn, gtid, deviceTaskType, streamId, taskId, commTaskName, opIndex)
    comm_tasks: List[tuple] = field(default_factory=list)
    # phases: (message, start, end)
    phases: List[tuple] = field(default_factory=list)
    task_insert_order: List[int] = field(default_factory=list)   # globalTaskIds in physical TASK order
    probes: Dict[str, dict] = field(default_factory=dict)


def _gt(pid: int, tid: int) -> int:
    return (pid << 32) | tid


def build_timeline(pop: Population, rank: int = 0, seed: int = 0, start_ns: Optional[int] = None,
                   pid: Optional[int] = None) -> Timeline:
    """Place every host op, API record and kernel of ``pop`` on one clock (deterministic per seed).

    Args:
        pop: the population.
        rank: rank index (shifts pid and adds a small per-rank time offset).
        seed: jitter seed; same inputs → identical timeline.
        start_ns: session start (default :data:`DEFAULT_START_NS` + rank·1 ms).
        pid: process id used in ``globalTid``/``globalPid`` (default derived from rank and side).
    Returns:
        a :class:`Timeline`.
    """
    rng = random.Random((seed * 1_000_003) ^ (rank * 7919) ^ (0 if pop.side == "train" else 1))
    pid = pid or (3_217_657 + 97 * rank + (0 if pop.side == "train" else 50_000))
    tids = {"main": pid, "queue": pid + 3_538, "backward": pid + 9_507, "acl": pid + 3_539}
    t0 = start_ns if start_ns is not None else DEFAULT_START_NS + rank * 1_000_000
    tl = Timeline(pid=pid, tids=tids, start_ns=t0)
    host = {"main": t0 + 8_000_000, "backward": t0 + 8_000_000}
    queue_t = t0
    dev_t = t0
    conn = 1_000          # CANN connection ids (real files start in the hundreds/thousands)
    qconn = 10_000_000    # task-queue links (Enqueue ↔ Dequeue), a separate range as in the fixture
    pconn = 0             # PYTORCH_API.connectionId → CONNECTION_IDS.id
    seqno = 1_000
    task_ids = {COMPUTE_STREAM: 11_000, COMM_STREAM: 800, CTRL_STREAM: 8}
    gtid = 0

    def task_id(stream: int) -> int:
        task_ids[stream] += 1
        return task_ids[stream]

    # profiling start marker (a TASK row with no CANN API, like the fixture's PROFILING_ENABLE)
    conn += 1
    tl.other_tasks.append((t0 + 7_000_000, t0 + 7_000_000, conn, gtid, "PROFILING_ENABLE", CTRL_STREAM,
                           task_id(CTRL_STREAM)))
    gtid += 1
    phase = None
    phase_start = 0
    pending_probe: List[KernelRow] = []
    for idx, op in enumerate(pop.ops):
        thread = "backward" if op.direction == "backward" else "main"
        if op.phase != phase:
            # a phase ends with a host sync on its results (log-probs to CPU, optimizer step done): the
            # MSTX range covers the phase's device kernels too
            synced = max(host["main"], host["backward"], dev_t, queue_t)
            if phase is not None:
                tl.phases.append((phase, phase_start, synced + 5_000))
            phase = op.phase
            host["main"] = host["backward"] = synced + 50_000
            phase_start = host["main"]
            if pop.side == "train" and not tl.phases and "generate_sequences" in pop.phases \
                    and phase != "generate_sequences":
                tl.phases.append(("generate_sequences", phase_start, phase_start + ROLLOUT_GAP_NS))
                host["main"] = host["backward"] = phase_start = phase_start + ROLLOUT_GAP_NS + 40_000
            # H2D copy of the phase's input batch: aclrtMemcpyAsync → MEMCPY_ASYNC task (not a kernel)
            conn += 1
            a0 = host["main"]
            tl.cann_rows.append((a0, a0 + 21_000, 20000, tids["main"], conn, "aclrtMemcpyAsync"))
            d0 = max(dev_t, a0 + 30_000)
            tl.other_tasks.append((d0, d0 + 6_500, conn, gtid, "MEMCPY_ASYNC", COMPUTE_STREAM,
                                   task_id(COMPUTE_STREAM)))
            gtid += 1
            dev_t = d0 + 6_500
            host["main"] = host["backward"] = a0 + 25_000
        t = host[thread] + rng.randint(2_000, 8_000)
        tid = tids[thread]
        n_k = len(op.kernels)
        acl_dur = 14_000 + 9_000 * n_k + rng.randint(0, 6_000)
        if op.kernels and op.kernels[0].accelerator == "COMMUNICATION":
            # stream sync before the collective: aclrtRecordEvent → EVENT_RECORD task (not a kernel)
            conn += 1
            tl.cann_rows.append((t, t + 6_000, 20000, tid, conn, "aclrtRecordEvent"))
            d0 = max(dev_t, t + 10_000)
            tl.other_tasks.append((d0, d0 + 20, conn, gtid, "EVENT_RECORD", COMPUTE_STREAM,
                                   task_id(COMPUTE_STREAM)))
            gtid += 1
            t += 8_000
        parent_row = None
        if op.parent:
            seqno += 1
            seq = seqno if thread == "main" else -1
            tl.api_rows.append([t, t + acl_dur + 9_000, thread, op.parent, 50001, None, seq,
                                0 if thread == "main" else 1, op.fw_shapes, op.fw_dtypes, op.stack, idx])
            parent_row = len(tl.api_rows) - 1
            a_start = t + 4_000
        else:
            a_start = t
        acl_row = None
        if op.name:
            acl_row = len(tl.api_rows)
            tl.api_rows.append([a_start, a_start + acl_dur, thread, op.name, 50001, None, -1,
                                0 if thread == "main" else 1, "" if op.parent else op.fw_shapes,
                                "" if op.parent else op.fw_dtypes, () if op.parent else op.stack, idx])
            if op.kernels:
                tl.api_rows[acl_row][5] = pconn
                my_pconn = pconn
                pconn += 1
                # the ACL API itself (CANN_API type 20000, what api_statistic.csv aggregates)
                if not op.name.startswith("npu::"):      # ATB ops bypass ACL
                    conn += 1
                    acl_name = op.kernels[0].op_type if op.kernels[0].accelerator == "COMMUNICATION" else op.name
                    tl.cann_rows.append((a_start + 1_500, a_start + acl_dur - 1_500, 20000, tid, conn, acl_name))
        placed: List[KernelRow] = []
        for ki, k in enumerate(op.kernels):
            enq = a_start + 5_000 + ki * 9_000
            conn += 1
            qconn += 1
            if op.name:
                tl.api_rows.append([enq, enq + 3_000, thread, "Enqueue", 50002, pconn, None, None, "", "", (), idx])
                tl.connection_ids.append((pconn, qconn))
                pconn += 1
            dq0 = max(queue_t, enq + 2_500)
            dq1 = dq0 + 11_000 + rng.randint(0, 4_000)
            queue_t = dq1 + 500
            if op.name:
                tl.api_rows.append([dq0, dq1, "queue", f"Dequeue@{op.name}", 50002, pconn, None, None, "", "", (),
                                    idx])
                tl.connection_ids.append((pconn, qconn))
                pconn += 1
                tl.connection_ids.append((my_pconn, conn))
            tl.cann_rows.append((dq0 + 1_500, dq1 - 800, 10000, tids["queue"], conn, "launch"))
            start = max(dev_t, dq1 + 1_000) + rng.randint(200, 1_800)
            dur = max(500, int(k.dur_ns * rng.uniform(0.93, 1.07)))
            is_comm = k.accelerator == "COMMUNICATION"
            stream = COMM_STREAM if is_comm else COMPUTE_STREAM
            kr = KernelRow(gtid, start, start + dur, conn, stream, task_id(stream), k, idx, acl_row)
            gtid += 1
            if is_comm:
                # HCCL: an umbrella TASK row plus notify/memcpy subtasks (COMMUNICATION_TASK_INFO)
                tl.cann_rows.append((dq0 + 2_000, dq1 - 1_500, 5500, tids["queue"], conn + 500_000, "Launch_Ffts"))
                sub = [("SDMA", "Memcpy"), ("Write Value", "Notify_Record"), ("Notify Wait", "Notify_Wait"),
                       ("SDMA", "Reduce_Inline")]
                step = dur // (len(sub) + 1)
                for si, (dtype, cname) in enumerate(sub):
                    s0 = start + 1_000 + si * step
                    tl.comm_tasks.append((s0, s0 + step - 500, conn, gtid, dtype, COMM_STREAM,
                                          task_id(COMM_STREAM), cname, idx))
                    gtid += 1
            dev_t = kr.end_ns
            placed.append(kr)
        if op.tag == "three_kernels":
            pending_probe = placed          # written out of order (after the next op's tasks, reversed)
        else:
            tl.kernels.extend(placed)
            for kr in placed:
                tl.task_insert_order.append(kr.global_task_id)
            if pending_probe and placed:
                tl.kernels.extend(pending_probe)
                tl.task_insert_order.extend(kr.global_task_id for kr in reversed(pending_probe))
                pending_probe = []
        if op.tag in ("zero_kernels", "three_kernels"):
            row = acl_row if acl_row is not None else parent_row
            tl.probes[op.tag] = {"name": op.name, "api_row": row, "start_ns": a_start,
                                 "pytorch_connection_id": tl.api_rows[row][5] if row is not None else None,
                                 "kernel_names": [k.name for k in op.kernels],
                                 "global_task_ids": [kr.global_task_id for kr in placed]}
        end_host = (tl.api_rows[parent_row][1] if parent_row is not None else a_start + acl_dur)
        host[thread] = end_host
        if thread == "backward":
            host["main"] = max(host["main"], end_host)
    if pending_probe:
        tl.kernels.extend(pending_probe)
        tl.task_insert_order.extend(kr.global_task_id for kr in reversed(pending_probe))
    last = max(host["main"], host["backward"], queue_t, dev_t)
    if phase is not None:
        tl.phases.append((phase, phase_start, last + 10_000))
    conn += 1
    tl.other_tasks.append((last + 20_000, last + 20_000, conn, gtid, "PROFILING_DISABLE", CTRL_STREAM,
                           task_id(CTRL_STREAM)))
    tl.end_ns = last + 120_000
    return tl
