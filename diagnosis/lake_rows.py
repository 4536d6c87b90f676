"""Write a dump analysis into the lake (tables in :mod:`tilake.lake.schema`).

``tensor_stats`` reads every tensor of every round once, one file at a time (float64 statistics
and a raw-byte hash, :func:`tilake.diagnosis.numerics.tensor_stats`); a missing or unreadable
``.pt`` becomes a row with ``status`` ``missing``/``unreadable`` and the reason, never a crash.
A slot of a statistics/md5 dump (no ``.pt``) keeps msprobe's own summary from dump.json
(:func:`summary_row`: status ``msprobe_summary``, ``stats_source`` ``msprobe``, ``md5``).
The write is atomic per run (:meth:`tilake.lake.store.Lake.write_run`).

``boundary_results`` rows also carry the dump verdict of their round as the analysis computed it
(:func:`verdict_facts`): first divergence, growth vs it, and each independent point's downstream
amplification. This is the one home of those facts; the dbt marts ``fct_boundary_diffs`` and
``fct_difference_points`` read them and derive nothing a second way.
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Callable, Dict, List, Optional, Sequence

from tilake.diagnosis.analyze import Analysis, RoundInput, amplification_chain
from tilake.diagnosis.numerics import tensor_stats, torch_threads
from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import DumpSide
from tilake.lake.dump_records import TaskCard
from tilake.lake.schema import DUMP_TABLES as DUMP_OWNED
from tilake.lake.store import Lake
from tilake.vocab import SKIPPED, BoundaryStatus, RoundOutcome


def _j(v) -> Optional[str]:
    return None if v is None else json.dumps(v, ensure_ascii=False, default=str)


def stats_rows(dump: DumpSide, side: str, round_no: int,
               progress: Optional[Callable[[int, int], None]] = None) -> List[dict]:
    """One ``tensor_stats`` row per tensor slot of ``dump`` (reads each ``.pt`` once)."""
    with torch_threads():
        return _stats_rows(dump, side, round_no, progress)


def _stats_rows(dump: DumpSide, side: str, round_no: int, progress) -> List[dict]:
    rows = []
    seen: Dict[str, dict] = {}
    n = len(dump.slots)
    for i, s in enumerate(dump.slots):
        if progress:
            progress(i, n)
        row = {"side": side, "rank": dump.rank if dump.rank is not None else 0, "round": round_no,
               "step": dump.step, "entry": s.entry, "io_kind": s.io, "idx": s.index,
               "exec_order": s.exec_order, "data_name": s.data_name, "declared_dtype": s.declared_dtype,
               "shape": s.declared_shape, "md5": (s.declared_stats or {}).get("md5")}
        if s.declared_stats and not (s.data_name and dump.meta.get("task") != "statistics"):
            # statistics/md5 dumps: msprobe may name a data_name it never wrote (real MindSpeed dump)
            row.update(summary_row(s))
            rows.append(row)
            continue
        if not s.data_name:
            row.update(status="no_data", reason="no .pt and no statistics in dump.json")
            rows.append(row)
            continue
        if s.data_name in seen:
            st = seen[s.data_name]
        else:
            try:
                t = dump.load(s)
                st = tensor_stats(t)
                del t
            except TilakeError as exc:
                st = {"_error": str(exc), "_status": "missing" if "missing" in str(exc) else "unreadable"}
            seen[s.data_name] = st
        if "_error" in st:
            row.update(status=st["_status"], reason=st["_error"])
        else:
            row.update({k: st[k] for k in ("dtype", "numel", "nbytes", "min", "max", "mean", "norm",
                                           "nan_count", "posinf_count", "neginf_count", "content_hash")})
            row["shape"] = st["shape"]
            row["dtype_mismatch"] = bool(s.declared_dtype and s.declared_dtype != st["dtype"])
            row["status"] = "ok"
            row["stats_source"] = "file"
            row["reason"] = (f"dump.json says {s.declared_dtype}, the file holds {st['dtype']}"
                             if row["dtype_mismatch"] else None)
        rows.append(row)
    return rows


def summary_row(s) -> dict:
    """``tensor_stats`` columns from msprobe's own summary of a slot without a ``.pt``.

    ``min``/``max``/``mean``/``norm`` are dump.json's ``Min``/``Max``/``Mean``/``Norm`` as msprobe
    wrote them (computed by msprobe on the device, float32 for floating tensors — not tilake's
    float64 over the file); ``md5`` is dump.json's ``md5`` (``summary_mode: md5``), kept apart from
    ``content_hash`` (tilake's sha256 of the raw bytes) so the two are never matched. ``numel`` is
    the product of the declared shape; ``nbytes`` and the non-finite counts stay NULL (unknown).
    Source of the fields: msprobe dump.json (real files in ``shared/fixtures/real_public/``).
    """
    st = s.declared_stats or {}

    def num(k: str) -> Optional[float]:
        v = st.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            return None
        try:
            return float(v)          # msprobe writes "inf"/"nan" as text for non-finite statistics
        except ValueError:
            return None
    shape = s.declared_shape
    numel = None
    if isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        numel = 1
        for d in shape:
            numel *= d
    md5 = st.get("md5")
    have = [k for k in ("Max", "Min", "Mean", "Norm") if num(k) is not None]
    what = ", ".join(have) + (" and md5" if md5 is not None else "") if have else ("md5" if md5 is not None else "nothing")
    return {"min": num("Min"), "max": num("Max"), "mean": num("Mean"), "norm": num("Norm"), "numel": numel,
            "dtype": s.declared_dtype, "md5": None if md5 is None else str(md5), "stats_source": "msprobe",
            "status": "msprobe_summary", "reason": f"no .pt: msprobe's own {what} from dump.json"}


def write_lake(lake: Lake, run_id: str, an: Analysis, rounds: Sequence[RoundInput], card: TaskCard,
               progress: Optional[Callable[[str, int, int], None]] = None,
               extra: Optional[Callable[[Any], None]] = None) -> Dict[str, int]:
    """Replace ``run_id``'s partitions of the dump tables with this analysis, in one commit. Returns rows per table.

    ``extra``: called with the run's writer (:class:`tilake.lake.store.RunWriter`) before the commit, to add
    rows of another dump table to the same commit (``dumps gate``: its ``dump_gates`` row).

    Raises:
        TilakeError: invalid run id; LakeBusyError when another writer holds the lake.
    """
    with lake.write_run(run_id, tables=DUMP_OWNED) as w:
        for k, rin in enumerate(rounds):
            for side, path in (("train", rin.train), ("infer", rin.infer)):
                d = DumpSide(path, side)
                rows = stats_rows(d, side, k, (lambda i, n, s=side, k=k: progress(f"tensor stats round {k} {s}", i, n))
                                  if progress else None)
                if rows:
                    w.write_rows("tensor_stats", rows,
                                 partition={"side": side, "rank": d.rank if d.rank is not None else 0})
        facts = verdict_facts(an)
        brow = []
        for r in an.boundary_rows:
            brow.append({**_brow(r, "activation"), **facts.get((r["round"], r["boundary"]), {})})
        for r in an.weight_rows:
            brow.append(_brow({**r, "round": 0}, "weight"))
        w.write_rows("boundary_results", brow)
        srows = []
        for r in an.rounds:
            if r["round"] == 0:
                continue
            ver = r.get("stub_verification") or {}
            srows.append({"round": r["round"], "isolated_boundary": (r.get("isolated") or [None])[-1],
                          "verified": ver.get("effective"), "verification": _j(ver), "outcome": r.get("outcome")})
        si = an.stub_instruction or {}
        if si.get("needed"):
            srows.append({"round": si.get("round"), "isolated_boundary": (si.get("isolate_boundary") or {}).get("name"),
                          "source_side": si.get("source_side"), "target_side": si.get("target_side"),
                          "available": si.get("available"), "instruction": _j(si), "verified": None,
                          "outcome": RoundOutcome.PENDING})
        w.write_rows("stub_rounds", srows)
        w.write_rows("dump_runs", [{
            "map_name": an.map_name, "reference_side": an.reference_side,
            "train_path": an.sides.get("train", {}).get("path"), "infer_path": an.sides.get("infer", {}).get("path"),
            "rounds": len(an.rounds), "verdict": an.verdict, "consistency": an.consistency,
            "verdict_reason": an.verdict_reason, "task_card": _j(card),
            "created_at": _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)}])
        if extra is not None:
            extra(w)
        return dict(w.rows_written)


FACT_COLUMNS = ("first_divergence_status", "is_first_divergence", "growth_vs_first",
                "downstream_differing", "downstream_max_abs_diff", "amplification")
_SKIPPED = SKIPPED


def verdict_facts(an: Analysis) -> Dict[tuple, dict]:
    """The analysis' verdict per activation boundary row, keyed by ``(round, boundary)``.

    Every row of a round gets the round's ``first_divergence_status`` (found | none | undetermined,
    :func:`tilake.diagnosis.analyze.first_divergence`) and ``is_first_divergence``; rows on the
    round's amplification chain get ``growth_vs_first`` (their ``max_abs_diff`` over the first
    divergence's, None when that is 0). Each independent difference point (``role`` =
    ``independent_point``) gets ``downstream_differing`` (compared boundaries after it in the round
    that differ: NOT_EXACT, DTYPE_DIFF or NONFINITE; SHAPE_DIFF and uncompared ones are off the
    chain), ``downstream_max_abs_diff`` (their largest ``max_abs_diff``, None when there are none)
    and ``amplification`` = that over the point's own ``max_abs_diff`` (None when either is
    missing or the point's is 0). Weight rows get none of these (NULL in the lake).
    """
    out: Dict[tuple, dict] = {}
    for rinfo in an.rounds:
        k = rinfo["round"]
        fd = rinfo.get("first_divergence") or {}
        rows = [r for r in an.boundary_rows if r["round"] == k]
        for r in rows:
            out[(k, r["boundary"])] = {c: None for c in FACT_COLUMNS}
            out[(k, r["boundary"])].update(first_divergence_status=fd.get("status"),
                                           is_first_divergence=r["boundary"] == fd.get("boundary"))
        for c in rinfo.get("amplification_chain") or []:
            out[(k, c["boundary"])]["growth_vs_first"] = c["growth_vs_first"]
        compared = [r for r in rows if r["status"] not in _SKIPPED]
        for p in rinfo.get("points") or []:
            chain = amplification_chain(compared, p["boundary"])
            down = [c for c in chain if c["position"] > p["position"] and c["status"] != BoundaryStatus.EXACT]
            diffs = [c["max_abs_diff"] for c in down if c["max_abs_diff"] is not None]
            dmax = max(diffs) if diffs else None
            own = p.get("max_abs_diff")
            out[(k, p["boundary"])].update(downstream_differing=len(down), downstream_max_abs_diff=dmax,
                                           amplification=(dmax / own) if (dmax is not None and own) else None)
    return out


def _brow(r: dict, kind: str) -> dict:
    out = {k: r.get(k) for k in ("round", "boundary", "position", "layer", "op", "status", "reason",
                                 "train_source", "infer_source", "train_dtype", "infer_dtype", "numel",
                                 "mismatch_count", "mismatch_fraction", "max_abs_diff", "ref_absmax",
                                 "tensor_ulp", "max_elem_ulp", "max_elem_ulp_significant", "signed_mean_ulp",
                                 "pos_count", "neg_count", "rows_total", "rows_differing", "cols_total",
                                 "cols_differing", "pattern", "systematic_bias", "inputs_equal", "class", "role")}
    out["kind"] = kind
    for k in ("inputs", "train_transforms", "infer_transforms", "train_shape", "infer_shape", "ulp_hist",
              "class_evidence", "notes"):
        out[k] = _j(r.get(k))
    return out
