"""Find the profiler captures of a verl ``profiler_output/`` tree and classify each one.

Layout (reference doc §3.1, §4.1; seed stage 2.4):
``<out>/e2e/<host>_<pid>_<ts>_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db``
(training, auto-parsed, export type Db) and ``<out>/agent_loop_rollout_replica_{n}/<…>_ascend_pt/``
(inference, vllm-ascend, export type Text, often still raw → needs ``analyse()``).
Discrete-mode role folders (``actor_update``, ``ref_compute_log_prob``, ``rollout_generate`` …) and
relocated ``rollout-replica*`` folders are recognised too.

A capture is one ``*_ascend_pt`` folder (or an explicit DB file) and is one of:
``db`` (an ``ascend_pytorch_profiler*.db`` exists), ``text`` (only CSV exports),
``raw`` (``FRAMEWORK/``/``PROF_*`` without any parsed output: run ``analyse()``), ``empty``,
or ``trace`` (a PyTorch-profiler Chrome trace, :mod:`tilake.ingest.torch.find`).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from tilake.errors import TilakeError
from tilake.ingest.torch.find import find_traces, is_trace_name, rank_of

TEXT_FILES = ("kernel_details.csv", "op_statistic.csv", "api_statistic.csv", "operator_details.csv")
_DB_RE = re.compile(r"^ascend_pytorch_profiler(?:_(\d+))?\.db$")
_INFO_RE = re.compile(r"^profiler_info(?:_(\d+))?\.json$")
_INFER_HINTS = ("rollout", "agent_loop", "vllm", "infer", "generate")


@dataclass
class Capture:
    """One profiler capture to ingest.

    Attributes:
        side: ``train`` or ``infer``. rank: global rank (from the DB/info file name, else 0).
        kind: ``db`` | ``text`` | ``raw`` | ``empty``. path: the DB file (db) or the
        ``ASCEND_PROFILER_OUTPUT`` folder (text) or the ``*_ascend_pt`` folder (raw/empty).
        pt_dir: the ``*_ascend_pt`` folder when known. text_dir: CSV folder beside a DB, if any.
        level: profiler level from ``profiler_info_*.json`` (``Level0``…) or None.
    """

    side: str
    rank: int
    kind: str
    path: Path
    pt_dir: Optional[Path] = None
    text_dir: Optional[Path] = None
    level: Optional[str] = None
    info: Dict = field(default_factory=dict)

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


def classify_pt_dir(pt_dir: Path, side: str) -> List[Capture]:
    """Classify one ``*_ascend_pt`` folder into captures (one per DB file found in it)."""
    out_dir = pt_dir / "ASCEND_PROFILER_OUTPUT"
    info = _read_info(pt_dir)
    level = _level(info)
    rank_default = info.get("_rank_from_name")
    text_dir = out_dir if out_dir.is_dir() and any((out_dir / f).exists() for f in TEXT_FILES) else None
    dbs = pt_dbs(pt_dir)
    caps = []
    for db in dbs:
        m = _DB_RE.match(db.name)
        rank = int(m.group(1)) if m and m.group(1) else (rank_default or 0)
        caps.append(Capture(side, rank, "db", db, pt_dir, text_dir, level, info))
    if caps:
        return caps
    rank = rank_default or 0
    if text_dir is not None:
        return [Capture(side, rank, "text", text_dir, pt_dir, text_dir, level, info)]
    return [Capture(side, rank, "raw" if is_raw(pt_dir) else "empty", pt_dir, pt_dir, None, level, info)]


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
            caps.append(c)
            seen.add(c.path.resolve())
    # loose DB files not inside an *_ascend_pt folder
    for db in sorted(root.rglob("ascend_pytorch_profiler*.db")):
        if db.resolve() in seen or not _DB_RE.match(db.name):
            continue
        m = _DB_RE.match(db.name)
        caps.append(Capture(side_of(list(db.relative_to(root).parts)),
                            int(m.group(1)) if m.group(1) else 0, "db", db))
    for tr, rank in find_traces(root):  # torch-profiler traces (global_profiler.tool=torch)
        caps.append(Capture(side_of(list(tr.relative_to(root).parts)), rank, "trace", tr))
    if not caps:
        raise TilakeError("no *_ascend_pt folder, ascend_pytorch_profiler*.db or torch trace "
                          "(prof_rank-*.json.gz, *.pt.trace.json) found "
                          "(expected e2e/… for training and agent_loop_rollout_replica_*/… for inference)",
                          path=root)
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
    if path.is_file() and (is_trace_name(path.name) or path.name.endswith((".json", ".json.gz"))):
        return [Capture(side, rank_of(path.name), "trace", path)]
    if path.is_file():
        m = _DB_RE.match(path.name)
        rank = int(m.group(1)) if m and m.group(1) else 0
        pt = path.parent.parent if path.parent.name == "ASCEND_PROFILER_OUTPUT" else None
        info = _read_info(pt) if pt else {}
        text_dir = path.parent if any((path.parent / f).exists() for f in TEXT_FILES) else None
        return [Capture(side, rank, "db", path, pt, text_dir, _level(info), info)]
    if path.name == "ASCEND_PROFILER_OUTPUT":
        return classify_pt_dir(path.parent, side)
    if path.name.endswith("_ascend_pt"):
        return classify_pt_dir(path, side)
    caps = [c for pt in sorted(path.rglob("*_ascend_pt")) if pt.is_dir() for c in classify_pt_dir(pt, side)]
    if not caps:
        caps = [c for db in sorted(path.rglob("ascend_pytorch_profiler*.db")) for c in explicit(db, side)]
    if not caps:
        caps = [Capture(side, rank, "trace", tr) for tr, rank in find_traces(path)]
    if not caps:
        raise TilakeError("no profiler capture (*_ascend_pt folder or ascend_pytorch_profiler*.db) inside",
                          path=path)
    return caps
