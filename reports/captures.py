"""What the reports say about a run's captures beyond their status: the profiler steps counted per side
and the invalid source rows each capture carried.

Both read ``fct_capture_health`` rows (or the same fields of an ingest's capture results):

* ``step_source`` — where the step markers came from (``STEP_TIME``, ``PYTORCH_API ProfilerStep#N``,
  ``kernel_details.csv Step Id``, …); NULL when the capture has none.
* ``steps_kept`` — JSON list of the steps counted (the steps every rank of the side covers, or the
  ``--profiler-step N`` selection). The selection is made at ingest (``tilake ingest/run --profiler-step
  N``): the kernels of other steps are not in the lake, so a report can only say which steps it covers.
* ``invalid_rows`` — JSON ``{problem: rows}`` (``tilake.ingest.profiler.rows``): rows kept for the kernel
  set but left out of timings, or repeated rows kept once.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Iterable, List, Optional

from tilake.reports.labels import label
from tilake.vocab import CaptureStatus


def _steps(v: Any) -> Optional[List[int]]:
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return [int(x) for x in v]
    try:
        out = json.loads(v)
    except (TypeError, ValueError):
        return None
    return [int(x) for x in out] if isinstance(out, list) else None


def steps_counted(captures: Iterable[Dict[str, Any]], side: str, lang: str = "zh") -> str:
    """One line naming the profiler steps counted on ``side``.

    ``captures``: dicts with ``side``, ``rank``, ``status``, ``step_source``, ``steps_kept`` (and ``role``: captures
    sharing a rank are named ``0 (actor-rollout/actor-update)``). Only usable
    captures (status ok / host_fallback) count. Examples (en): ``steps 50 (STEP_TIME; ranks 0, 1)``,
    ``no step markers: every captured kernel counted (ranks 0)``, ``no evidence``.
    """
    mine = [c for c in captures if c.get("side") == side
            and c.get("status") in (CaptureStatus.OK, CaptureStatus.HOST_FALLBACK)]
    if not mine:
        return label("steps.no_evidence", lang)
    parts = []
    kept: Dict[tuple, List[Any]] = {}
    all_steps, unmarked = [], []
    per_rank: Dict[Any, int] = {}
    for c in mine:
        per_rank[c.get("rank")] = per_rank.get(c.get("rank"), 0) + 1

    def who(c: Dict[str, Any]) -> Any:
        # several captures of one rank (discrete-mode role folders or traces): named by role, never "0, 0, 0"
        return f"{c.get('rank')} ({c['role']})" if per_rank[c.get("rank")] > 1 and c.get("role") else c.get("rank")

    for c in sorted(mine, key=lambda c: (c.get("rank") is None, c.get("rank"), c.get("role") or "")):
        steps = _steps(c.get("steps_kept"))
        if steps is not None:
            kept.setdefault((tuple(steps), c.get("step_source") or ""), []).append(who(c))
        elif c.get("step_source"):
            all_steps.append(who(c))
        else:
            unmarked.append(who(c))
    ranks = lambda rs: ", ".join(str(r) for r in rs)  # noqa: E731
    for (steps, src), rs in kept.items():
        s = ", ".join(str(x) for x in steps)
        parts.append(label("steps.kept", lang, steps=s, source=src, ranks=ranks(rs),
                           s="s" if len(steps) > 1 else "", rs="s" if len(rs) > 1 else ""))
    if all_steps:
        parts.append(label("steps.every_step", lang, ranks=ranks(all_steps)))
    if unmarked:
        parts.append(label("steps.unmarked", lang, ranks=ranks(unmarked)))
    return "; ".join(parts)


def steps_note(lang: str = "zh") -> str:
    """Why the report cannot pick another step: the selection is made at ingest."""
    return label("steps.note", lang)


def invalid_text(invalid_rows: Any) -> str:
    """``negative_duration=3, duplicate_string_ids=2`` from the ``invalid_rows`` JSON; '' when none or
    unreadable (the raw JSON is then shown as is)."""
    if not invalid_rows:
        return ""
    try:
        d = json.loads(invalid_rows) if isinstance(invalid_rows, str) else dict(invalid_rows)
    except (TypeError, ValueError):
        return str(invalid_rows)
    if not isinstance(d, dict):
        return str(invalid_rows)
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()) if v)


def status_text(status: Any, invalid_rows: Any) -> str:
    """A capture's status for the health tables: ``ok`` only when no row was counted invalid, else
    ``ok, 7 rows invalid`` (the kinds are in the invalid-rows column)."""
    n = 0
    try:
        d = json.loads(invalid_rows) if isinstance(invalid_rows, str) else dict(invalid_rows or {})
        n = sum(v for v in d.values() if isinstance(v, int)) if isinstance(d, dict) else 0
    except (TypeError, ValueError):
        n = 0
    return f"{status}, {n} rows invalid" if n else str(status)


def ingest_capture_rows(captures: Iterable[Any]) -> List[Dict[str, Any]]:
    """The fields :func:`steps_counted` reads, from an ingest's capture results (objects with
    ``capture.side``, ``capture.rank``, ``status``, ``marks.source``, ``steps_kept``)."""
    out = []
    for r in captures:
        marks = getattr(r, "marks", None)
        counts = getattr(r, "step_counts", None)
        out.append({"side": r.capture.side, "rank": r.capture.rank, "status": r.status,
                    "step_source": (getattr(marks, "source", "") or None) if counts is not None
                    and getattr(counts, "per_step", None) else None,
                    "steps_kept": getattr(r, "steps_kept", None), "role": getattr(r.capture, "role", "") or None})
    return out


CATALOG_SEEDS = {"trace": "op_catalog_torch.csv", "db": "op_catalog.csv", "text": "op_catalog.csv"}
"""The op catalog seed that names a capture's kernels, by ``source_kind``: PyTorch-profiler traces
(CUDA kernels, aten CPU ops) are catalogued in ``op_catalog_torch.csv``, Ascend DBs and text exports
(CANN op types) in ``op_catalog.csv`` (docs/rules.md)."""


def catalog_hint(source_kinds: Iterable[Optional[str]], lang: str = "zh") -> str:
    """Where to add kernels no op_catalog row names: the seed file of their captures' backend, in a rules folder.

    ``source_kinds``: the ``source_kind`` of the capture of each uncatalogued kernel's side (``trace``: a
    PyTorch-profiler trace; ``db``/``text``: Ascend; None: unknown, read as Ascend). Returns one sentence naming
    ``--rules DIR`` and ``op_catalog_torch.csv`` and/or ``op_catalog.csv`` (the shipped file, whose header a new
    row copies: ``dbt_project/seeds/<file>``).
    """
    files = sorted({CATALOG_SEEDS.get(k or "db", "op_catalog.csv") for k in source_kinds}) or ["op_catalog.csv"]
    return label("catalog.hint", lang, files=" / ".join(files), shipped=", ".join(f"dbt_project/seeds/{f}" for f in files))


def uncatalogued_kinds(uncategorized: Iterable[Dict[str, Any]], captures: Iterable[Dict[str, Any]]) -> List[Optional[str]]:
    """The capture ``source_kind`` of each ``fct_uncategorized_kernels`` row's side (for :func:`catalog_hint`)."""
    kinds = {c.get("side"): c.get("source_kind") for c in captures}
    return [kinds.get(u.get("side")) for u in uncategorized]
