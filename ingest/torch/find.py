"""Find PyTorch-profiler Chrome traces under a folder (verl's torch-profiler layout).

verl (``verl/utils/profiler/torch_profile.py``, ``docs/perf/torch_profiling.md``) writes
``<save_path>/[<role>/][<prefix>_]prof_rank-<rank>.json.gz``; vLLM and
``torch.profiler.tensorboard_trace_handler`` write ``<worker>.<ts_ms>.pt.trace.json[.gz]``.
The side is decided by the caller from the folder names (``rollout``/``agent_loop``/``vllm`` → infer).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import List, Tuple

TRACE_RE = re.compile(r"(?:^|_)prof_rank-(\d+)\.json(?:\.gz)?$|\.pt\.trace\.json(?:\.gz)?$")
_RANK_RE = re.compile(r"(?:prof_rank-|rank[_-]?)(\d+)")


def is_trace_name(name: str) -> bool:
    """Whether a file name is a torch-profiler trace name (``prof_rank-N.json[.gz]``, ``*.pt.trace.json[.gz]``)."""
    return bool(TRACE_RE.search(name))


def rank_of(name: str) -> int:
    """Rank from the file name (``prof_rank-3`` / ``rank3``), else 0."""
    m = _RANK_RE.search(name)
    return int(m.group(1)) if m else 0


def trace_rank(path: Path) -> Tuple[int, str]:
    """(rank, source) of one trace: ``distributedInfo.rank`` when the head of the object has it
    (``distributedInfo``), else the file name (``file_name``), else 0 (``default``). A
    ``distributedInfo`` written after ``traceEvents`` is read by the ingest's streaming pass, which
    then moves the capture to that rank. An unreadable head falls back to the file name (the ingest
    reports the damage)."""
    from tilake.errors import TilakeError
    from tilake.ingest.torch.events import read_header

    try:
        r = read_header(Path(path)).distributed.get("rank")
    except (TilakeError, OSError):
        r = None
    if isinstance(r, int) and not isinstance(r, bool) and r >= 0:
        return r, "distributedInfo"
    m = _RANK_RE.search(Path(path).name)
    return (int(m.group(1)), "file_name") if m else (0, "default")


def find_traces(root: Path) -> List[Tuple[Path, int]]:
    """Every trace file under ``root`` (sorted), with its rank (:func:`trace_rank`)."""
    return [(p, trace_rank(p)[0]) for p in sorted(Path(root).rglob("*.json*"))
            if p.is_file() and is_trace_name(p.name)]
