"""The kernel alignment step: categorised kernels of one run (warehouse) → alignment rows (lake).

Runs after ``dbt build`` (the categories, modules and catalog ``replaces`` come from the dbt model
``int_kernels_categorised``; the alignment itself is numerics, :mod:`tilake.diagnosis.kernel_align`)
and writes ``raw/kernel_layers`` and ``raw/kernel_alignment`` for the run, atomically
(:meth:`tilake.lake.store.Lake.write_run`; re-aligning replaces them). The marts
``fct_kernel_layers`` / ``fct_kernel_alignment`` / ``fct_boundary_kernels`` are views over those
files, so no second build is needed.
"""
from __future__ import annotations

import bisect
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import duckdb

from tilake.diagnosis.kernel_align import Kernel, StepAlignment, align_step
from tilake.diagnosis.kernel_layers import layer_index_of, range_layer_intervals
from tilake.lake.read import reading_file
from tilake.lake.schema import ALIGN_TABLES
from tilake.lake.store import Lake
from tilake.vocab import AlignStatus

# the lowest rank of each side, its kernels in launch order with their catalog columns and host-op stack
KERNELS_SQL = """
with k as (
    select side, rank, capture_id, start_ns, global_task_id, kernel_name, op_type, base_op, category, module,
           fused, replaces, equiv_class, input_shapes, callchain_id, call_count
    from int_kernels_categorised
    where run_id = $run_id
),
r as (select side, min(rank) as rank from k group by side),
st as (
    select side, rank, callchain_id, list(frame order by depth) as frames
    from stg_profiler__call_stacks where run_id = $run_id group by all
)
select k.side, k.rank, k.kernel_name, k.op_type, k.base_op, k.category, k.module, k.fused, k.replaces,
       k.equiv_class, k.input_shapes, k.call_count, st.frames, k.capture_id, k.start_ns
from k join r using (side, rank)
left join st on st.side = k.side and st.rank = k.rank and st.callchain_id = k.callchain_id
order by k.side, k.start_ns nulls last, k.global_task_id
"""


# per-layer module ranges of the aligned ranks' captures (FSDP2: FSDP::pre_forward (model.layers.N) / post_forward)
RANGES_SQL = """
with r as (select side, min(rank) as rank from int_kernels_categorised where run_id = $run_id group by side)
select g.side, g.capture_id, g.message, g.start_ns, g.end_ns
from stg_profiler__mstx_ranges g join r on r.side = g.side and r.rank = g.rank
where g.run_id = $run_id and regexp_matches(g.message, '^FSDP::(pre|post)_forward')
"""

# the model's decoder layers as recorded with the run (launch script / HF config / rl_config) and the PP size
MODEL_SQL = """
select layers,
       coalesce(json_extract_string(settings, '$.num_layers.source'),
                case when json_extract_string(rl_config, '$.num_layers') is not null
                     then coalesce(json_extract_string(rl_config, '$.num_layers_source'), 'rl_config.num_layers') end)
           as source,
       coalesce(try_cast(json_extract_string(settings, '$.train_pp.value') as integer),
                try_cast(json_extract_string(parallel_config, '$.pp') as integer)) as train_pp
from int_runs_parallelism join stg_profiler__runs using (run_id)
where run_id = $run_id
"""


def load_kernels(warehouse: Path, run_id: str) -> Tuple[Dict[str, List[Kernel]], Dict[str, int], Dict[str, str]]:
    """Each side's kernels of ``run_id`` (lowest rank) from the warehouse, read-only.

    A kernel's ``layer_module`` is its decoder layer by the trace's own module boundaries: an ``nn.Module:
    <Family>DecoderLayer_<n>`` frame of its stack, else the FSDP2 per-layer forward range of its capture that
    holds its start (:func:`tilake.diagnosis.kernel_layers.range_layer_intervals`).

    Returns:
        ``(kernels by side, rank by side, problem by side)``; a side whose rows are aggregated text
        rows (``call_count > 1``: no launch order) is left out with its problem.
    """
    with reading_file(warehouse) as con:
        rows = con.execute(KERNELS_SQL, {"run_id": run_id}).fetchall()
        ranges = con.execute(RANGES_SQL, {"run_id": run_id}).fetchall()
    intervals: Dict[Tuple[str, str], List[Tuple[int, int, int]]] = {}
    by_cap: Dict[Tuple[str, str], List[Tuple[str, int, int]]] = {}
    for side, cap, msg, a, b in ranges:
        by_cap.setdefault((side, cap), []).append((msg, a, b))
    for key, rs in by_cap.items():
        intervals[key] = range_layer_intervals(rs)
    out: Dict[str, List[Kernel]] = {"train": [], "infer": []}
    ranks: Dict[str, int] = {}
    problems: Dict[str, str] = {}
    for (side, rank, name, op, base, cat, mod, fused, rep, eq, shapes, calls, frames, cap, start) in rows:
        if calls and calls > 1:
            problems[side] = "aggregated text rows (call_count > 1) carry no launch order"
        ranks[side] = rank
        frames = tuple(frames or ())
        layer = layer_index_of(frames)
        if layer is None and start is not None and intervals.get((side, cap)):
            layer = _in_interval(intervals[(side, cap)], start)
        out.setdefault(side, []).append(Kernel(
            pos=len(out.get(side, [])), name=name or "", op_type=op or "", base=base or "", category=cat or "",
            module=mod or "", fused=bool(fused), replaces=tuple(x for x in (rep or "").split("+") if x),
            equiv=eq or "", shapes=shapes or "", frames=frames, layer_module=layer))
    for side in problems:
        out[side] = []
    return out, ranks, problems


def _in_interval(intervals: List[Tuple[int, int, int]], t: int) -> Optional[int]:
    """The layer of the interval holding ``t`` (intervals sorted, not overlapping), else None."""
    j = bisect.bisect_right(intervals, (t, float("inf"), 0)) - 1
    if j >= 0 and intervals[j][0] <= t < intervals[j][1]:
        return intervals[j][2]
    return None


def boundary_sources(kernels: Dict[str, List[Kernel]]) -> Dict[str, str]:
    """Per side, what gave its kernels' ``layer_module``: the layer-module frame, or FSDP's per-layer ranges."""
    out = {}
    for side, ks in kernels.items():
        fr = next((f for k in ks if k.layer_module is not None for f in k.frames if layer_index_of((f,)) is not None),
                  None)
        if fr:
            out[side] = fr
        elif any(k.layer_module is not None for k in ks):
            out[side] = "FSDP::pre_forward … FSDP::post_forward (…layers.N) ranges"
    return out


def model_layers(warehouse: Path, run_id: str) -> Dict[str, Tuple[int, str]]:
    """Per side, the model's decoder layers recorded with the run and where the count comes from (the
    training side's is divided by the pipeline-parallel size: a PP stage runs its share); {} when unknown."""
    with reading_file(warehouse) as con:
        row = con.execute(MODEL_SQL, {"run_id": run_id}).fetchone()
    if not row or not row[0]:
        return {}
    n, src, pp = int(row[0]), row[1] or "recorded with the run", row[2]
    train = (n // pp, f"{src}, {n} / PP {pp}") if pp and pp > 1 and n % pp == 0 else (n, src)
    return {"train": train, "infer": (n, src)}


def _span(idx: List[int]) -> Tuple[Optional[int], Optional[int]]:
    return (min(idx), max(idx)) if idx else (None, None)


def alignment_rows(run_id: str, al: StepAlignment, ranks: Dict[str, int],
                   problems: Dict[str, str]) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """``(kernel_layers rows, kernel_alignment rows)`` of one run (see :mod:`tilake.lake.schema`)."""
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    status, reason = al.status, al.reason
    if problems:
        status, reason = AlignStatus.EVIDENCE_MISSING, "; ".join(f"{s}: {p}" for s, p in sorted(problems.items()))
    layers: List[Dict[str, Any]] = []
    windows = {}
    for sf in (al.train, al.infer):
        if sf is None:
            continue
        win = f"forward {sf.index + 1} of {sf.forward_count}"
        windows[sf.side] = win
        base = dict(run_id=run_id, side=sf.side, rank=ranks.get(sf.side), forward_window=win,
                    forward_count=sf.forward_count, forwards_identical=sf.forwards_identical,
                    method=sf.split.method, confidence=sf.split.confidence, period=sf.split.period,
                    anchor=sf.split.anchor or None, frame=sf.split.frame or None, status=status,
                    reason=reason or sf.split.note or None, created_at=now)
        if not sf.split.layers:
            layers.append(dict(base, layer=None, odd=None))
        for li, (s, e) in enumerate(sf.split.layers):
            layers.append(dict(base, layer=li, start_pos=s, end_pos=e, kernel_count=e - s,
                               kernels=" → ".join(k.op_type or k.name for k in sf.kernels[s:e]),
                               odd=li in sf.split.odd, odd_reason=sf.split.odd.get(li)))
    for side in ("train", "infer"):
        if side not in windows:
            layers.append(dict(run_id=run_id, side=side, rank=ranks.get(side), method="none", confidence=0.0,
                               status=status, reason=reason or f"no forward pass on the {side} side",
                               created_at=now))
    pairs: List[Dict[str, Any]] = []
    phase = f"train {windows.get('train', '?')} ↔ infer {windows.get('infer', '?')}"
    if not problems:
        for li, groups in al.pairs.items():
            ts = al.train.split.layers[li][0]
            is_ = al.infer.split.layers[li][0]
            for gi, p in enumerate(groups):
                tk = [al.train.kernels[ts + x] for x in p.train]
                ik = [al.infer.kernels[is_ + x] for x in p.infer]
                lead = (ik if p.fused_side == "infer" else tk) or tk or ik
                t0, t1 = _span(p.train)
                i0, i1 = _span(p.infer)
                pairs.append(dict(
                    run_id=run_id, phase_pair=phase, train_rank=ranks.get("train"), infer_rank=ranks.get("infer"),
                    layer=li, position=gi, relation=p.relation, confidence=p.confidence,
                    evidence=json.dumps(p.evidence, ensure_ascii=False), fused_side=p.fused_side or None,
                    module=lead[0].module, category=lead[0].category,
                    train_first=t0, train_last=t1, infer_first=i0, infer_last=i1,
                    train_kernels=" → ".join(k.op_type or k.name for k in tk) or None,
                    infer_kernels=" → ".join(k.op_type or k.name for k in ik) or None,
                    train_kernel_names=json.dumps([k.name for k in tk]) if tk else None,
                    infer_kernel_names=json.dumps([k.name for k in ik]) if ik else None,
                    train_shapes=tk[0].shapes.replace('"', "") if tk else None,
                    infer_shapes=ik[0].shapes.replace('"', "") if ik else None,
                    odd_layer=li in al.odd, odd_reason=al.odd.get(li)))
    return layers, pairs


def align_run(lake: Lake, run_id: str) -> Dict[str, Any]:
    """Align run ``run_id``'s kernels (warehouse) and write its alignment rows into the lake.

    Returns:
        ``{"status", "reason", "layers": {side: n}, "groups": n, "odd_layers": {layer: reason}}``.
    Raises:
        TilakeError: the lake is busy or cannot be written (see :meth:`Lake.write_run`).
    """
    kernels, ranks, problems = load_kernels(lake.warehouse, run_id)
    al = align_step(kernels.get("train", []), kernels.get("infer", []), model_layers(lake.warehouse, run_id),
                    boundary_sources(kernels))
    layer_rows, pair_rows = alignment_rows(run_id, al, ranks, problems)
    with lake.write_run(run_id, ALIGN_TABLES) as w:
        w.write_rows("kernel_layers", layer_rows)
        if pair_rows:
            w.write_rows("kernel_alignment", pair_rows)
    status = AlignStatus.EVIDENCE_MISSING if problems else al.status
    return {"status": status, "reason": "; ".join(problems.values()) or al.reason,
            "layers": {sf.side: len(sf.split.layers) for sf in (al.train, al.infer) if sf is not None},
            "groups": len(pair_rows), "odd_layers": dict(al.odd)}


STALE_SQL = """
select r.run_id
from stg_profiler__runs r
left join (select run_id, max(created_at) as aligned_at from stg_alignment__kernel_layers group by run_id) a
  using (run_id)
where a.aligned_at is null or a.aligned_at < r.created_at
order by r.run_id
"""


def align_stale_runs(lake: Lake) -> Dict[str, Dict[str, Any]]:
    """:func:`align_run` for every run of the warehouse whose profile is newer than its alignment (or
    has none): ``tilake build`` after ``tilake ingest``. Returns run id → :func:`align_run` result."""
    if not lake.warehouse.exists():
        return {}
    with lake.reading(raw=False) as con:
        try:
            runs = [r[0] for r in con.execute(STALE_SQL).fetchall()]
        except duckdb.Error:   # a warehouse built before the alignment models existed: nothing to align yet
            runs = []
    return {r: align_run(lake, r) for r in runs}
