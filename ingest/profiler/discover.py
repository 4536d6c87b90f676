"""Find the profiler captures of a verl ``profiler_output/`` tree and classify each one.

Layout (reference doc §3.1, §4.1; seed stage 2.4):
``<out>/e2e/<host>_<pid>_<ts>_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db``
(training, auto-parsed, export type Db) and ``<out>/agent_loop_rollout_replica_{n}/<…>_ascend_pt/``
(inference, vllm-ascend, export type Text, often still raw → needs ``analyse()``).
Discrete-mode role folders (``actor_update``, ``ref_compute_log_prob``, ``rollout_generate`` …) and
relocated ``rollout-replica*`` folders are recognised too.

Rollout workers (vllm-ascend) may write ``ascend_pytorch_profiler.db`` (no rank suffix) with
``rank_id: -1`` in ``profiler_info.json``, one ``<host>_<pid>_<ts>_ascend_pt`` folder per worker: such a
capture has no rank id; :func:`assign_worker_ranks` gives each one its own rank slot and identity
(worker folder, pid from the folder name, device id from the DB's ``RANK_DEVICE_MAP``/``NPU_INFO``).
Several captures of one (side, rank, role folder) are duplicates (e.g. level-0/1/2 DBs and text exports of
the same rank side by side): :func:`dedupe` keeps one by a stated rule and lists the others.

A capture is one ``*_ascend_pt`` folder (or an explicit DB file) and is one of:
``db`` (an ``ascend_pytorch_profiler*.db`` exists), ``text`` (only CSV exports),
``raw`` (``FRAMEWORK/``/``PROF_*`` without any parsed output: run ``analyse()``), ``empty``,
or ``trace`` (a PyTorch-profiler Chrome trace, :mod:`tilake.ingest.torch.find`).
"""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from tilake.errors import TilakeError
from tilake.ingest.torch.find import TraceName, find_summaries, find_traces, is_trace_name, trace_name

TEXT_FILES = ("kernel_details.csv", "op_statistic.csv", "api_statistic.csv", "operator_details.csv")
_DB_RE = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
_INFO_RE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_INFER_HINTS = ("rollout", "agent_loop", "vllm", "infer", "generate")
# torch_npu names the capture folder <host>_<pid>_<timestamp>_ascend_pt (reference §3.1)
_PT_RE = re.compile(r"^(?:.*_)?(\d+)_(\d{14,})_ascend_pt$")
# verl role / replica folders: captures in different ones are different processes or roles, never duplicates
_ROLE_RE = re.compile(r"^(agent_loop_rollout_replica_\d+|rollout[-_]?replica[-_]?\d+|actor_update|update_actor|"
                      r"ref_compute_log_prob|compute_ref_log_prob|actor_compute_log_prob|compute_log_prob|"
                      r"rollout_generate|generate_sequences|replica_\d+|worker_\d+)$", re.I)
_LEVELS = {"Level0": 0, "Level1": 1, "Level2": 2}


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


#: verl torch-trace scopes/prefixes that belong to the rollout (inference) side
_INFER_SCOPE_RE = re.compile(r"^(rollout|generate|vllm|sglang|infer)", re.I)
#: the older layout ``<save_path>/<step>/e2e/…``: a numeric first folder is the RL step
_STEP_DIR_RE = re.compile(r"^(?:step[_-]?)?(\d+)$")


def side_of(rel_parts: List[str]) -> str:
    """Guess the side from the path below ``profiler_output`` (rollout/agent_loop → infer)."""
    head = "/".join(rel_parts[:2]).lower()
    return "infer" if any(h in head for h in _INFER_HINTS) else "train"


def _read_info(pt_dir: Path) -> Dict:
    for p in sorted(pt_dir.glob("profiler_info*.json")):
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        m = _INFO_RE.match(p.name)
        data["_rank_from_name"] = int(m.group(1)) if m and m.group(1) else None
        return data
    return {}


def _level(info: Dict) -> Optional[str]:
    try:
        return info["config"]["experimental_config"]["_profiler_level"]
    except (KeyError, TypeError):
        return None


def pt_dbs(pt_dir: Path) -> List[Path]:
    """The ``ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler*.db`` files of an ``*_ascend_pt`` folder."""
    out = pt_dir / "ASCEND_PROFILER_OUTPUT"
    return sorted(out.glob("ascend_pytorch_profiler*.db")) if out.is_dir() else []


def is_raw(pt_dir: Path) -> bool:
    """Whether the folder holds raw profiler data (``FRAMEWORK/`` or ``PROF_*``), parsed or not."""
    return (pt_dir / "FRAMEWORK").is_dir() or any(p.is_dir() for p in pt_dir.glob("PROF_*"))


def _info_rank(info: Dict) -> tuple:
    """(rank, source) from ``profiler_info*.json``: its file name, else its ``rank_id`` (-1 = none)."""
    if info.get("_rank_from_name") is not None:
        return info["_rank_from_name"], "file_name"
    try:
        rid = int(info["rank_id"])
    except (KeyError, TypeError, ValueError):
        return 0, "default"
    if rid >= 0:
        return rid, "profiler_info"
    return 0, "none"  # rank_id -1: a rollout worker outside torch.distributed


def pid_of(pt_dir: Optional[Path]) -> Optional[int]:
    """Process id from a ``<host>_<pid>_<timestamp>_ascend_pt`` folder name, else None."""
    m = _PT_RE.match(pt_dir.name) if pt_dir is not None else None
    return int(m.group(1)) if m else None


def device_of(db: Path) -> Optional[int]:
    """Device id of a profiler DB: ``RANK_DEVICE_MAP.deviceId``, else ``NPU_INFO.id`` (-1 = not collected);
    None when neither table gives one (reference §2.2; one row per device folder)."""
    try:
        con = sqlite3.connect(f"file:{db.resolve()}?mode=ro&immutable=1", uri=True)
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


def classify_pt_dir(pt_dir: Path, side: str) -> List[Capture]:
    """Classify one ``*_ascend_pt`` folder into captures (one per DB file found in it)."""
    out_dir = pt_dir / "ASCEND_PROFILER_OUTPUT"
    info = _read_info(pt_dir)
    level = _level(info)
    rank_default, source_default = _info_rank(info)
    text_dir = out_dir if out_dir.is_dir() and any((out_dir / f).exists() for f in TEXT_FILES) else None
    dbs = pt_dbs(pt_dir)
    caps = []
    for db in dbs:
        m = _DB_RE.match(db.name)
        rank, src = (int(m.group(1)), "file_name") if m and m.group(1) else (rank_default, source_default)
        caps.append(Capture(side, rank, "db", db, pt_dir, text_dir, level, info, src, pid=pid_of(pt_dir)))
    if not caps:
        kind = "text" if text_dir is not None else "raw" if is_raw(pt_dir) else "empty"
        caps = [Capture(side, rank_default, kind, text_dir if kind == "text" else pt_dir, pt_dir, text_dir,
                        level, info, source_default, pid=pid_of(pt_dir))]
    for c in caps:
        if c.rank_source == "none":
            c.worker = pt_dir.name
            c.device_id = device_of(c.path) if c.kind == "db" else None
    return caps


def _level_rank(level: Optional[str]) -> int:
    return _LEVELS.get(level or "", -1)


def _end_time(c: Capture) -> int:
    try:
        return int(c.info["end_info"]["collectionTimeEnd"])
    except (KeyError, TypeError, ValueError):
        return 0


def dedupe(caps: List[Capture]) -> List[Capture]:
    """Keep one capture per (side, rank, role folder); the others are listed on the kept one's ``duplicates``.

    Rule (stated in the capture health reason): a DB over a text export over raw/empty folders, then the
    highest profiler level (``Level2`` > ``Level1`` > ``Level0`` > unknown), then the latest
    ``collectionTimeEnd`` of ``profiler_info``, then the first path. Torch traces and rank-less worker
    captures (each its own process) are never duplicates. Duplicates are never summed.
    """
    kind_rank = {"db": 3, "text": 2, "raw": 1, "empty": 0}
    groups: Dict[tuple, List[Capture]] = {}
    out: List[Capture] = []
    for c in caps:
        if c.kind == "trace" or c.rankless:
            out.append(c)
        else:
            groups.setdefault((c.side, c.rank, c.role), []).append(c)
    for grp in groups.values():
        grp = sorted(grp, key=lambda c: (-kind_rank.get(c.kind, 0), -_level_rank(c.level), -_end_time(c),
                                         str(c.path)))
        keep = grp[0]
        keep.duplicates = grp[1:]
        out.append(keep)
    return out


def assign_worker_ranks(caps: List[Capture]) -> List[Capture]:
    """Give every rank-less capture (``rank_id: -1``) its own rank slot per side: the next numbers after
    the side's highest real rank, in worker-folder order; ``rank_source`` becomes ``worker`` and
    ``workers`` the number of such captures merged into the side total."""
    for side in {c.side for c in caps}:
        free = [c for c in caps if c.side == side and c.rank_source == "none"]
        if not free:
            continue
        taken = [c.rank for c in caps if c.side == side and not c.rankless]
        base = max(taken) + 1 if taken else 0
        for i, c in enumerate(sorted(free, key=lambda c: (str(c.pt_dir or c.path), str(c.path)))):
            c.rank, c.rank_source, c.workers = base + i, "worker", len(free)
    return caps


def discover(root: Path) -> List[Capture]:
    """Every capture under a verl ``profiler_output`` folder, sorted by side, rank, path.

    Raises:
        TilakeError: ``root`` does not exist, is not a folder, or holds no ``*_ascend_pt`` folder
            and no ``ascend_pytorch_profiler*.db``.
    """
    root = Path(root)
    if not root.exists():
        raise TilakeError("profiler output folder does not exist", path=root)
    if not root.is_dir():
        raise TilakeError("expected a profiler_output folder", path=root)
    caps: List[Capture] = []
    seen = set()
    for pt in sorted(root.rglob("*_ascend_pt")):
        if not pt.is_dir() or any(p.endswith("_ascend_pt") for p in pt.relative_to(root).parts[:-1]):
            continue
        side = side_of(list(pt.relative_to(root).parts))
        for c in classify_pt_dir(pt, side):
            c.role = role_of(list(pt.relative_to(root).parts[:-1]))
            caps.append(c)
            seen.add(c.path.resolve())
    # loose DB files not inside an *_ascend_pt folder
    for db in sorted(root.rglob("ascend_pytorch_profiler*.db")):
        if db.resolve() in seen or not _DB_RE.match(db.name):
            continue
        m = _DB_RE.match(db.name)
        caps.append(Capture(side_of(list(db.relative_to(root).parts)), int(m.group(1)) if m.group(1) else 0,
                            "db", db, rank_source="file_name" if m.group(1) else "default",
                            role=role_of(list(db.relative_to(root).parts[:-1]))))
    for db in msprof_dbs(root):          # msprof's own export (service profiling, no torch_npu layer)
        if db.resolve() not in seen:
            caps.append(msprof_capture(db, side_of(list(db.relative_to(root).parts)),
                                       role_of(list(db.relative_to(root).parts[:-1]))))
            seen.add(db.resolve())
    for tr, _rank in find_traces(root):  # torch-profiler traces (global_profiler.tool=torch)
        caps.append(trace_capture(tr, list(tr.relative_to(root).parts)))
    _attach_summaries(caps, root)
    for c in caps:
        if c.rl_step is None:
            m = _STEP_DIR_RE.match(c.path.relative_to(root).parts[0]) if len(c.path.relative_to(root).parts) > 1 else None
            if m:
                c.rl_step, c.rl_step_source = int(m.group(1)), "folder"
    if not caps:
        raise TilakeError("no profiler capture found: no *_ascend_pt folder, ascend_pytorch_profiler*.db, "
                          "or PyTorch-profiler trace", path=root, hint=NOTHING_FOUND_HINT)
    return sorted(caps, key=lambda c: (c.side != "train", c.rank, str(c.path)))


_MSPROF_DB_RE = re.compile(r"^msprof_\d+\.db$")


def msprof_dbs(root: Path) -> List[Path]:
    """msprof's own DB exports under ``root``: ``PROF_*/mindstudio_profiler_output/msprof_<ts>.db`` outside any
    ``*_ascend_pt`` folder (msprof ``--export`` / vllm-ascend service profiling: CANN tables only, no
    ``PYTORCH_API``; inside an ``*_ascend_pt`` folder the torch_npu DB of the same data is read instead)."""
    out = []
    for db in sorted(Path(root).rglob("msprof_*.db")):
        rel = db.relative_to(root).parts
        if (_MSPROF_DB_RE.match(db.name) and db.parent.name == "mindstudio_profiler_output"
                and db.parent.parent.name.startswith("PROF_")
                and not any(p.endswith("_ascend_pt") for p in rel[:-1])):
            out.append(db)
    return out


def msprof_capture(db: Path, side: str, role: str = "") -> Capture:
    """A capture for one msprof export DB: rank from ``RANK_DEVICE_MAP.rankId`` (``-1`` = none: the capture gets
    a worker slot, :func:`assign_worker_ranks`), device from ``deviceId``; ``worker`` is its ``PROF_*`` folder."""
    rank, dev = None, device_of(db)
    try:
        con = sqlite3.connect(f"file:{db.resolve()}?mode=ro&immutable=1", uri=True)
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
    role = tn.role or role_of(rel_parts[:-1])
    cap = Capture(side, tn.rank, "trace", Path(path), role=role, pid=tn.pid,
                  rank_source="file_name" if tn.rank_named else "default")
    cap.replica = tn.replica
    if tn.replica is not None:
        cap.engine_rank = tn.rank
        if tn.global_rank is not None:
            cap.rank, cap.rank_source = tn.global_rank, "global_rank"
    if tn.rl_step is not None:
        cap.rl_step, cap.rl_step_source = tn.rl_step, "file_name"
    return cap


def _attach_summaries(caps: List[Capture], root: Path) -> None:
    """vLLM's ``profiler_out_<r>.txt`` summaries: listed on a trace capture of the same folder (else the
    first infer capture), never read as evidence."""
    for txt in find_summaries(root):
        near = [c for c in caps if c.kind == "trace" and c.path.parent == txt.parent]
        near = near or [c for c in caps if c.side == "infer"]
        if near:
            near[0].ignored.append(txt)


def assign_replica_ranks(caps: List[Capture]) -> List[Capture]:
    """Rollout replicas repeat engine rank 0 (each replica is its own vLLM engine): give every replica's trace
    its own rank slot per side, in (replica, engine rank) order, so replicas are counted per replica and never
    merged or dropped as duplicates. Relocated traces with ``-globalrank<g>`` keep ``g``.
    ``rank_source`` becomes ``replica``."""
    for side in {c.side for c in caps}:
        reps = [c for c in caps if c.side == side and c.replica is not None and c.rank_source != "global_rank"]
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


def explicit(path: Path, side: str) -> List[Capture]:
    """Captures from a path the user named for one side: a DB file, an ``*_ascend_pt`` folder,
    an ``ASCEND_PROFILER_OUTPUT`` folder, or any folder holding such.

    Raises:
        TilakeError: the path does not exist or holds no capture.
    """
    path = Path(path)
    if side not in ("train", "infer"):
        raise TilakeError(f"side must be train or infer, not {side!r}")
    if not path.exists():
        raise TilakeError("does not exist", path=path)
    if path.is_file() and (is_trace_name(path.name) or path.name.endswith((".json", ".json.gz"))):
        return [trace_capture(path, [path.parent.name, path.name], side)]
    if path.is_file() and _MSPROF_DB_RE.match(path.name):
        return [msprof_capture(path, side)]
    if path.is_file():
        m = _DB_RE.match(path.name)
        pt = path.parent.parent if path.parent.name == "ASCEND_PROFILER_OUTPUT" else None
        info = _read_info(pt) if pt else {}
        rank, src = (int(m.group(1)), "file_name") if m and m.group(1) else _info_rank(info)
        text_dir = path.parent if any((path.parent / f).exists() for f in TEXT_FILES) else None
        cap = Capture(side, rank, "db", path, pt, text_dir, _level(info), info, src, pid=pid_of(pt))
        if src == "none":
            cap.worker, cap.device_id = (pt or path.parent).name, device_of(path)
        return [cap]
    if path.name == "ASCEND_PROFILER_OUTPUT":
        return classify_pt_dir(path.parent, side)
    if path.name.endswith("_ascend_pt"):
        return classify_pt_dir(path, side)
    caps = [c for pt in sorted(path.rglob("*_ascend_pt")) if pt.is_dir() for c in classify_pt_dir(pt, side)]
    for c in caps:
        c.role = role_of(list(Path(c.pt_dir).relative_to(path).parts[:-1])) if c.pt_dir else ""
    if not caps:
        caps = [c for db in sorted(path.rglob("ascend_pytorch_profiler*.db")) for c in explicit(db, side)]
    if not caps:
        caps = [trace_capture(tr, list(tr.relative_to(path).parts), side) for tr, _rank in find_traces(path)]
        _attach_summaries(caps, path)
    if not caps:
        raise TilakeError("no profiler capture (*_ascend_pt folder, ascend_pytorch_profiler*.db or PyTorch-profiler "
                          "trace) inside", path=path, hint=NOTHING_FOUND_HINT)
    return caps
