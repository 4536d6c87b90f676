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
or ``trace`` (a PyTorch-profiler Chrome trace, :mod:`tilake.ingest.torch.find`). verl's torch-profiler
layouts, msprof's own export, RL steps and rollout replicas are :mod:`.verl_layouts`; the capture record is
:mod:`.capture` (both re-exported here).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List, Optional

from tilake.errors import TilakeError
from tilake.ingest.inputs import check_regular, skip_special
from tilake.ingest.profiler.capture import Capture, device_of, role_of, side_of  # noqa: F401 (re-exported)
from tilake.ingest.profiler.verl_layouts import (  # noqa: F401 (re-exported)
    _MSPROF_DB_RE,
    _STEP_DIR_RE,
    NOTHING_FOUND_HINT,
    assign_replica_ranks,
    attach_summaries,
    msprof_capture,
    msprof_dbs,
    order_rollout_steps,
    replica_of,
    rl_steps,
    select_rl_step,
    set_replica,
    trace_capture,
)
from tilake.ingest.torch.find import find_traces, is_trace_name
from tilake.lake.duck import sqlite_ro  # noqa: F401 (re-exported)

TEXT_FILES = ("kernel_details.csv", "op_statistic.csv", "api_statistic.csv", "operator_details.csv")
_DB_RE = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
_INFO_RE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
# torch_npu names the capture folder <host>_<pid>_<timestamp>_ascend_pt (reference §3.1)
_PT_RE = re.compile(r"^(?:.*_)?(\d+)_(\d{14,})_ascend_pt$")
_LEVELS = {"Level0": 0, "Level1": 1, "Level2": 2}


def _read_info(pt_dir: Path) -> Dict:
    for p in sorted(pt_dir.glob("profiler_info*.json")):
        if skip_special(p, "profiler_info sidecar"):
            continue
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
    """Keep one capture per (side, rank, role folder, rollout replica); the others are listed on the kept one's
    ``duplicates``.

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
        else:   # two rollout replicas repeat engine rank 0: never duplicates of each other
            groups.setdefault((c.side, c.rank, c.role, c.replica), []).append(c)
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
            caps.append(set_replica(c, list(pt.relative_to(root).parts)))
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
            caps.append(set_replica(msprof_capture(db, side_of(list(db.relative_to(root).parts)),
                                                   role_of(list(db.relative_to(root).parts[:-1]))),
                                    list(db.relative_to(root).parts)))
            seen.add(db.resolve())
    for tr, _rank in find_traces(root):  # torch-profiler traces (global_profiler.tool=torch)
        caps.append(trace_capture(tr, list(tr.relative_to(root).parts)))
    attach_summaries(caps, root)
    for c in caps:
        if c.rl_step is None:
            m = _STEP_DIR_RE.match(c.path.relative_to(root).parts[0]) if len(c.path.relative_to(root).parts) > 1 else None
            if m:
                c.rl_step, c.rl_step_source = int(m.group(1)), "folder"
    if not caps:
        raise TilakeError("no profiler capture found: no *_ascend_pt folder, ascend_pytorch_profiler*.db, "
                          "or PyTorch-profiler trace", path=root, hint=NOTHING_FOUND_HINT)
    return sorted(caps, key=lambda c: (c.side != "train", c.rank, str(c.path)))


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
    if not path.is_dir():
        check_regular(path, "the named capture")    # a FIFO or device: one line, never opened
    if path.is_file() and (is_trace_name(path.name) or path.name.endswith((".json", ".json.gz"))):
        return [trace_capture(path, [path.parent.name, path.name], side)]
    if path.is_file() and _MSPROF_DB_RE.match(path.name):
        return [msprof_capture(path, side)]
    if path.is_dir() and not path.name.endswith("_ascend_pt") and path.name != "ASCEND_PROFILER_OUTPUT":
        dbs = msprof_dbs(path) or ([db for db in sorted(path.glob("msprof_*.db")) if _MSPROF_DB_RE.match(db.name)]
                                   if path.name == "mindstudio_profiler_output" else [])
        if dbs and not any(path.rglob("*_ascend_pt")):   # a PROF_* folder of msprof / the service profiler
            return [set_replica(msprof_capture(db, side), [path.name, *db.relative_to(path).parts]) for db in dbs]
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
        if c.pt_dir:
            set_replica(c, [path.name, *Path(c.pt_dir).relative_to(path).parts])
    if not caps:
        caps = [c for db in sorted(path.rglob("ascend_pytorch_profiler*.db")) for c in explicit(db, side)]
    if not caps:
        caps = [trace_capture(tr, list(tr.relative_to(path).parts), side) for tr, _rank in find_traces(path)]
        attach_summaries(caps, path)
    if not caps:
        raise TilakeError("no profiler capture (*_ascend_pt folder, ascend_pytorch_profiler*.db or PyTorch-profiler "
                          "trace) inside", path=path, hint=NOTHING_FOUND_HINT)
    return caps
