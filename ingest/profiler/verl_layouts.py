"""verl's capture layouts beyond one ``*_ascend_pt`` folder per rank: PyTorch-profiler traces (verl >= 0.9 names,
rollout replica folders, relocated files), msprof's own DB export, several profiled RL steps, and rollout replicas
that repeat engine rank 0. Used by :func:`tilake.ingest.profiler.discover.discover`; the layouts are documented in
``docs/scan.md`` and :mod:`tilake.ingest.torch.find`.
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tilake.errors import TilakeError
from tilake.ingest.profiler.capture import Capture, device_of, role_of, side_of
from tilake.ingest.torch.find import (
    RELOCATED_RE,
    REPLICA_DIR_RE,
    TraceName,
    find_summaries,
    trace_engine,
    trace_name,
    trace_rank,
)
from tilake.lake.duck import sqlite_ro

#: verl torch-trace scopes/prefixes that belong to the rollout (inference) side
_INFER_SCOPE_RE = re.compile(r"^(rollout|generate|vllm|sglang|infer)", re.I)
#: the older layout ``<save_path>/<step>/e2e/…``: a numeric first folder is the RL step
_STEP_DIR_RE = re.compile(r"^(?:step[_-]?)?(\d+)$")


_MSPROF_DB_RE = re.compile(r"^msprof_\d+\.db$")
#: a msprof ``PROF_*`` folder, also relocated by verl (``rollout-replica<r>[-globalrank<g>]_PROF_…``)
_PROF_DIR_RE = re.compile(r"^(?:rollout-replica\d+(?:-globalrank\d+)?_)?PROF_")


def replica_of(rel_parts: List[str]) -> Tuple[Optional[int], Optional[int]]:
    """``(replica, global rank)`` of a rollout capture from its path below ``save_path``: an
    ``agent_loop_rollout_replica_<r>`` folder (verl ``rollout_trace_dir``, the nested layout), else a name that
    verl's ``relocate_rollout_traces`` (``global_profiler.relocate_results=True``) moved up into ``save_path``:
    ``rollout-replica<r>[-globalrank<g>]_<original name>`` (verl ``utils/profiler/config.py``; ``-globalrank`` only
    with a replica spanning several devices). ``(None, None)`` when neither: a replica's engine repeats rank 0, so
    without the replica two replicas would read as duplicates of one rank."""
    for part in rel_parts:
        m = REPLICA_DIR_RE.match(part)
        if m:
            return int(m.group(1)), None
    for part in rel_parts:
        m = RELOCATED_RE.match(part)
        if m:
            return int(m.group("replica")), (int(m.group("grank")) if m.group("grank") else None)
    return None, None


def set_replica(cap: Capture, rel_parts: List[str]) -> Capture:
    """Give an Ascend / msprof capture its rollout replica (:func:`replica_of`) so :func:`assign_replica_ranks`
    counts it per replica: ``engine_rank`` keeps the rank the capture names, a ``-globalrank<g>`` becomes its rank
    (``rank_source`` ``global_rank``); a relocated capture outside any role folder gets the role
    ``rollout replica <r>``. Captures of no replica are returned unchanged."""
    replica, grank = replica_of(rel_parts)
    if replica is None:
        return cap
    cap.replica, cap.engine_rank = replica, cap.rank
    if grank is not None:
        cap.rank, cap.rank_source = grank, "global_rank"
    if not cap.role:
        cap.role = f"rollout replica {replica}"
    return cap


def msprof_dbs(root: Path) -> List[Path]:
    """msprof's own DB exports under ``root``: ``PROF_*/mindstudio_profiler_output/msprof_<ts>.db`` outside any
    ``*_ascend_pt`` folder (msprof ``--export`` / vllm-ascend service profiling: CANN tables only, no
    ``PYTORCH_API``; inside an ``*_ascend_pt`` folder the torch_npu DB of the same data is read instead)."""
    out = []
    for db in sorted(Path(root).rglob("msprof_*.db")):
        rel = db.relative_to(root).parts
        if (_MSPROF_DB_RE.match(db.name) and db.parent.name == "mindstudio_profiler_output"
                and _PROF_DIR_RE.match(db.parent.parent.name)
                and not any(p.endswith("_ascend_pt") for p in rel[:-1])):
            out.append(db)
    return out


def msprof_capture(db: Path, side: str, role: str = "") -> Capture:
    """A capture for one msprof export DB: rank from ``RANK_DEVICE_MAP.rankId`` (``-1`` = none: the capture gets
    a worker slot, :func:`assign_worker_ranks`), device from ``deviceId``; ``worker`` is its ``PROF_*`` folder."""
    rank, dev = None, device_of(db)
    try:
        con = sqlite_ro(db)
        try:
            vals = {r[0] for r in con.execute("SELECT rankId FROM RANK_DEVICE_MAP") if isinstance(r[0], int)}
        finally:
            con.close()
        rank = vals.pop() if len(vals) == 1 and next(iter(vals)) >= 0 else None
    except (sqlite3.Error, StopIteration):
        rank = None
    cap = Capture(side, rank if rank is not None else 0, "db", db, rank_source="profiler_info" if rank is not None
                  else "none", role=role)
    cap.worker = db.parent.parent.name
    cap.device_id = dev
    return cap


#: the layouts discovery knows, for "nothing found" errors
NOTHING_FOUND_HINT = (
    "Ascend: e2e/<host>_<pid>_<ts>_ascend_pt/ (training) and agent_loop_rollout_replica_*/…_ascend_pt/ (rollout), "
    "msprof's PROF_*/mindstudio_profiler_output/msprof_<ts>.db; "
    "PyTorch profiler (global_profiler.tool=torch): verl >= 0.9 <role>_<scope>_step<N>_rank<r>-of-<ws>_pid<pid>_<ts>.json.gz "
    "(training) and agent_loop_rollout_replica_<r>/*.pt.trace.json.gz or rollout-replica<r>_*.pt.trace.json.gz "
    "(rollout), older verl [<role>/]prof_rank-<r>.json.gz, or any *.json[.gz] Chrome trace (traceEvents)")


def trace_capture(path: Path, rel_parts: List[str], side: Optional[str] = None) -> Capture:
    """A torch-trace capture with the identity its name and folders give (:func:`tilake.ingest.torch.find.trace_name`).

    Side (when not given): a verl >= 0.9 training-worker name is train unless its prefix/scope names the
    rollout; a replica folder or a relocated ``rollout-replica<r>_`` name is infer; otherwise the folder names
    decide (:func:`side_of`).
    """
    tn: TraceName = trace_name(path, rel_parts)
    if side is None:
        if tn.layout == "verl09":
            side = "infer" if _INFER_SCOPE_RE.match(tn.prefix or "") or _INFER_SCOPE_RE.match(tn.scope or "") \
                else "train"
        elif tn.replica is not None:
            side = "infer"
        else:
            side = side_of(rel_parts)
            if side == "train" and trace_engine(path) == "vllm":
                side = "infer"          # a vLLM engine's trace outside a replica folder (header vllm_version)
                tn.role = "vLLM engine (trace header vllm_version)"
    role = tn.role or role_of(rel_parts[:-1])
    cap = Capture(side, tn.rank, "trace", Path(path), role=role, pid=tn.pid,
                  rank_source="file_name" if tn.rank_named else "default")
    cap.replica = tn.replica
    if tn.replica is not None:
        cap.engine_rank = tn.rank
        if tn.global_rank is not None:
            cap.rank, cap.rank_source = tn.global_rank, "global_rank"
    elif tn.global_rank is None:
        # the trace's own distributedInfo.rank beats the file name (a distributedInfo written after
        # traceEvents is applied by the ingest's streaming pass, tilake.ingest.torch.load.trace_rank_of)
        rank, src = trace_rank(Path(path))
        if src == "distributedInfo":
            cap.rank, cap.rank_source = rank, src
    if tn.rl_step is not None:
        cap.rl_step, cap.rl_step_source = tn.rl_step, "file_name"
    return cap


def attach_summaries(caps: List[Capture], root: Path) -> None:
    """vLLM's ``profiler_out_<r>.txt`` summaries: listed on a trace capture of the same folder (else the
    first infer capture), never read as evidence."""
    for txt in find_summaries(root):
        here = [c for c in caps if c.kind == "trace" and c.path.parent == txt.parent]
        near = ([c for c in here if c.side == "infer"] or here or [c for c in caps if c.side == "infer"])
        if near:
            near[0].ignored.append(txt)


def assign_replica_ranks(caps: List[Capture]) -> List[Capture]:
    """Rollout replicas repeat engine rank 0 (each replica is its own vLLM engine): give every replica's trace
    its own rank slot per side, in (replica, engine rank) order, so replicas are counted per replica and never
    merged or dropped as duplicates. Relocated traces with ``-globalrank<g>`` keep ``g``.
    ``rank_source`` becomes ``replica``."""
    for side in {c.side for c in caps}:
        # rank-less workers (rank_id -1) already have a slot each (assign_worker_ranks)
        reps = [c for c in caps if c.side == side and c.replica is not None
                and c.rank_source not in ("global_rank", "none", "worker")]
        if not reps:
            continue
        keys = sorted({(c.replica, c.engine_rank or 0) for c in reps})
        taken = {c.rank for c in caps if c.side == side and (c.replica is None or c.rank_source == "global_rank")}
        slots, nxt = {}, 0
        for k in keys:
            while nxt in taken:
                nxt += 1
            slots[k] = nxt
            nxt += 1
        for c in reps:
            c.rank, c.rank_source = slots[(c.replica, c.engine_rank or 0)], "replica"
    return caps


def rl_steps(caps: List[Capture]) -> List[int]:
    """The RL steps the captures profiled (sorted; empty when no capture says)."""
    return sorted({c.rl_step for c in caps if c.rl_step is not None})


def order_rollout_steps(caps: List[Capture]) -> None:
    """With several profiled RL steps, a replica folder holds one rollout trace per step and the names carry no
    step: the k-th trace of a (replica, engine rank) by file name order (vLLM names end in the ms timestamp)
    is the k-th profiled step; ``rl_step_source`` says ``order``. Done only when the counts match."""
    steps = rl_steps(caps)
    if len(steps) < 2:
        return
    groups: Dict[tuple, List[Capture]] = {}
    for c in caps:
        if c.kind == "trace" and c.rl_step is None and c.replica is not None:
            groups.setdefault((c.side, c.replica, c.engine_rank), []).append(c)
    for grp in groups.values():
        if len(grp) == len(steps):
            for c, s in zip(sorted(grp, key=lambda c: c.path.name), steps):
                c.rl_step, c.rl_step_source = s, "order"


def select_rl_step(caps: List[Capture], rl_step: Optional[int]) -> List[Capture]:
    """Keep the captures of one profiled RL step.

    Several steps (verl ``global_profiler.steps=[1,2]``, or ``<save_path>/<step>/…``) are never summed and never
    dropped silently: without ``rl_step`` they are refused with the list of steps. Captures without a step keep
    their place (one window whatever the step).

    Raises:
        TilakeError: several steps and no ``rl_step``; ``rl_step`` not among them; captures of other steps
            whose step is unknown next to them (a replica holding more traces than the steps).
    """
    order_rollout_steps(caps)
    steps = rl_steps(caps)
    if rl_step is None:
        if len(steps) > 1:
            per = ", ".join(f"step {s}: {sum(1 for c in caps if c.rl_step == s)} capture(s)" for s in steps)
            raise TilakeError(f"captures of {len(steps)} profiled RL steps found ({per}); they are never summed",
                              hint="choose one with --rl-step N (--step stays the run's label)")
        return caps
    if rl_step not in steps:
        raise TilakeError(f"--rl-step {rl_step}: no capture of that RL step (steps found: "
                          f"{', '.join(map(str, steps)) or 'none: the names and folders give no step'})")
    kept = [c for c in caps if c.rl_step in (None, rl_step)]
    loose = {}
    for c in kept:
        if c.rl_step is None and c.kind == "trace":
            loose.setdefault((c.side, c.rank, c.role), []).append(c)
    many = [k for k, v in loose.items() if len(v) > 1]
    if many:
        side, rank, role = many[0]
        raise TilakeError(f"--rl-step {rl_step}: {len(loose[many[0]])} {side} traces of rank {rank}"
                          f"{' (' + role + ')' if role else ''} carry no RL step and cannot be told apart",
                          path=loose[many[0]][0].path.parent, hint="ingest each step's files with --train/--infer")
    return kept
