"""One profiler capture to ingest, and what its path says about it (side, verl role folder, device).

Shared by discovery (:mod:`.discover`) and verl's layouts (:mod:`.verl_layouts`).
"""
from __future__ import annotations

import hashlib
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from tilake.lake.duck import sqlite_ro

_INFER_HINTS = ("rollout", "agent_loop", "vllm", "infer", "generate")
# verl role / replica folders: captures in different ones are different processes or roles, never duplicates
_ROLE_RE = re.compile(r"^(agent_loop_rollout_replica_\d+|rollout[-_]?replica[-_]?\d+|actor_update|update_actor|"
                      r"ref_compute_log_prob|compute_ref_log_prob|actor_compute_log_prob|compute_log_prob|"
                      r"rollout_generate|generate_sequences|replica_\d+|worker_\d+)$", re.I)


@dataclass
class Capture:
    """One profiler capture to ingest.

    Attributes:
        side: ``train`` or ``infer``. rank: global rank (from the DB/info file name, else 0).
        kind: ``db`` | ``text`` | ``raw`` | ``empty``. path: the DB file (db) or the
        ``ASCEND_PROFILER_OUTPUT`` folder (text) or the ``*_ascend_pt`` folder (raw/empty).
        pt_dir: the ``*_ascend_pt`` folder when known. text_dir: CSV folder beside a DB, if any.
        level: profiler level from ``profiler_info_*.json`` (``Level0``…) or None.
        rank_source: where ``rank`` came from: ``file_name`` (``…_{rank}.db`` / ``profiler_info_{rank}.json``),
            ``profiler_info`` (``rank_id``), ``worker`` (no rank id: a slot given by :func:`assign_worker_ranks`)
            or ``default`` (nothing said; rank 0).
        worker, pid, device_id: identity of a capture without a rank id (worker folder, process id from the
            ``<host>_<pid>_<ts>_ascend_pt`` name, device from ``RANK_DEVICE_MAP``/``NPU_INFO``).
        role: verl role/replica folder names on the capture's path (``agent_loop_rollout_replica_0`` …), or the
            role a torch trace's name gives (``actor-rollout/train``, ``rollout replica 1``), or "".
        duplicates: captures of the same (side, rank, role) that :func:`dedupe` ignored in favour of this one.
        workers: number of rank-less worker captures of this side merged into the side total (0 if ranked).
        rl_step / rl_step_source: the RL step the capture profiled (verl ``global_profiler.steps``) and where
            that came from (``file_name`` ``…_step<N>_…``, ``folder`` ``<save_path>/<N>/…``, ``order`` the k-th
            trace of a replica = the k-th profiled step), else None / "".
        replica / engine_rank: rollout replica index and the engine's own (tensor-parallel) rank of a rollout
            trace, when known; replicas repeat engine rank 0, so each gets its own rank slot
            (:func:`assign_replica_ranks`, ``rank_source`` ``replica`` or ``global_rank``).
        ignored: files beside the capture recognised and not read as evidence (vLLM ``profiler_out_<r>.txt``).
    """

    side: str
    rank: int
    kind: str
    path: Path
    pt_dir: Optional[Path] = None
    text_dir: Optional[Path] = None
    level: Optional[str] = None
    info: Dict = field(default_factory=dict)
    rank_source: str = "default"
    worker: Optional[str] = None
    pid: Optional[int] = None
    device_id: Optional[int] = None
    role: str = ""
    duplicates: List["Capture"] = field(default_factory=list)
    workers: int = 0
    rl_step: Optional[int] = None
    rl_step_source: str = ""
    replica: Optional[int] = None
    engine_rank: Optional[int] = None
    ignored: List[Path] = field(default_factory=list)

    @property
    def rankless(self) -> bool:
        """True when neither the file names nor ``profiler_info`` give a rank id (``rank_id: -1``)."""
        return self.rank_source in ("none", "worker")

    def describe(self) -> str:
        """Short label: kind, profiler level and path (used when listing duplicates)."""
        return f"{self.kind} {self.level or 'level unknown'} {self.path}"

    @property
    def capture_id(self) -> str:
        """Stable id: side, rank and the folder name of the capture."""
        base = (self.pt_dir or self.path).name
        digest = hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:8]
        return re.sub(r"[^A-Za-z0-9._-]", "_", f"{self.side}-r{self.rank}-{base}-{digest}")


def side_of(rel_parts: List[str]) -> str:
    """Guess the side from the path below ``profiler_output`` (rollout/agent_loop → infer)."""
    head = "/".join(rel_parts[:2]).lower()
    return "infer" if any(h in head for h in _INFER_HINTS) else "train"


def device_of(db: Path) -> Optional[int]:
    """Device id of a profiler DB: ``RANK_DEVICE_MAP.deviceId``, else ``NPU_INFO.id`` (-1 = not collected);
    None when neither table gives one (reference §2.2; one row per device folder)."""
    try:
        con = sqlite_ro(db)
    except sqlite3.Error:
        return None
    try:
        for sql in ("SELECT deviceId FROM RANK_DEVICE_MAP", "SELECT device_id FROM RANK_DEVICE_MAP",
                    "SELECT id FROM NPU_INFO"):
            try:
                vals = {r[0] for r in con.execute(sql) if isinstance(r[0], int) and r[0] >= 0}
            except sqlite3.Error:
                continue
            if len(vals) == 1:
                return vals.pop()
        return None
    finally:
        con.close()


def role_of(parts: List[str]) -> str:
    """The verl role/replica folder names on a capture's relative path, joined by ``/`` ("" if none)."""
    return "/".join(p for p in parts if _ROLE_RE.match(p))


def identity_notes(cap: "Capture") -> List[str]:
    """What capture health says about where ``cap`` came from: msprof export, verl role, rollout replica and its
    rank slot, RL step and how it was found, ignored summaries beside it, duplicates not ingested, rank-less
    worker slot; one sentence each (empty when plain)."""
    notes = []
    if cap.kind == "db" and cap.path.name.startswith("msprof_") and cap.path.parent.name == "mindstudio_profiler_output":
        notes.append("msprof export (service profiling, no torch_npu layer): CANN tables only, so host ops "
                     "(PYTORCH_API) and call stacks are absent; kernels from TASK ⋈ COMPUTE_TASK_INFO")
    if cap.role and cap.replica is None:
        notes.append(f"role {cap.role}")
    if cap.replica is not None:
        how = (f"global rank {cap.rank} (relocated -globalrank)" if cap.rank_source == "global_rank"
               else f"rank slot {cap.rank}")
        notes.append(f"rollout replica {cap.replica}, engine rank {cap.engine_rank if cap.engine_rank is not None else 0}: "
                     f"{how}, one capture per replica (replicas repeat engine rank 0; counted per replica)")
    if cap.rl_step is not None:
        src = {"file_name": "from the file name", "folder": "from the <save_path>/<step>/ folder",
               "order": "by file order in the replica folder (the k-th trace = the k-th profiled step)"}
        notes.append(f"RL step {cap.rl_step} ({src.get(cap.rl_step_source, cap.rl_step_source)})")
    for p in cap.ignored:
        notes.append(f"{p.name} beside it: vLLM's profiler summary table (text rendering of the same trace), "
                     "recognised and not read as evidence")
    if cap.duplicates:
        notes.append(f"kept over {len(cap.duplicates)} duplicate capture(s) of {cap.side} rank {cap.rank} "
                     "(rule: DB over text export, then highest profiler level, then latest): ignored "
                     + "; ".join(d.describe() for d in cap.duplicates))
    if cap.rank_source == "worker":
        notes.append(f"worker without rank id (rank_id -1): folder {cap.worker}, pid "
                     f"{cap.pid if cap.pid is not None else 'unknown'}, device "
                     f"{cap.device_id if cap.device_id is not None else 'unknown'}; rank slot {cap.rank}, "
                     f"{cap.workers} worker(s) merged into the {cap.side} total")
    return notes
