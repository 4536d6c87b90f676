"""Which profiler steps a side counts: the steps every rank with step markers covers (or ``--profiler-step N``),
each capture's kernels restricted to them, a rank without markers among step-windowed ranks left out
(:func:`restrict_steps`), and the step columns of a capture's health row (:func:`step_row`). Marks and the
kernel → step assignment are :mod:`tilake.ingest.profiler.steps`."""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from tilake.errors import TilakeError
from tilake.ingest.profiler.evidence import USABLE
from tilake.ingest.profiler.steps import common_steps, restrict
from tilake.vocab import CaptureStatus

# a capture's outcome (tilake.ingest.profiler.load.CaptureResult: capture, status, reason, notes, info, files, kernels,
# marks, step_counts, steps_kept); named by its fields here, so this module does not import the loader
CaptureResult = Any


def restrict_steps(w, results: List[CaptureResult], profiler_step: Optional[int]) -> List[str]:
    """Count per side only the steps every capture with step markers covers (or ``profiler_step``)."""
    lines = []
    for side in ("train", "infer"):
        mine = [r for r in results if r.capture.side == side and r.status in USABLE and r.files
                and r.capture.kind in ("db", "text", "trace")]
        marked = [r for r in mine if r.step_counts.per_step]
        for r in mine:
            if not r.step_counts.per_step:
                r.notes.append("no step markers (STEP_TIME, ProfilerStep#N, kernel_details Step Id): "
                               "all kernels counted, not restricted to common steps")
            elif r.step_counts.tail:
                last = max(r.step_counts.per_step)
                r.notes.append(f"open tail: {r.step_counts.tail} kernel call(s) launched after step {last} "
                               f"ended (kept; --profiler-step {last} counts that step only)")
        if not marked:
            continue
        if profiler_step is not None:
            lacking = [r for r in marked if profiler_step not in r.step_counts.per_step]
            if lacking:
                raise TilakeError(f"--profiler-step {profiler_step}: not captured by " + "; ".join(
                    f"{r.capture.side} rank {r.capture.rank} (steps {sorted(r.step_counts.per_step)})"
                    for r in lacking))
            keep = [profiler_step]
        else:
            keep = common_steps([list(r.step_counts.per_step) for r in marked])
        ranks = ", ".join(str(r.capture.rank) for r in marked)
        if not keep:  # disjoint steps: restricting would drop everything; count all and say so
            lines.append(f"{side}: no step is covered by every rank (" + "; ".join(
                f"rank {r.capture.rank}: {sorted(r.step_counts.per_step)}" for r in marked)
                + "): all steps counted; --profiler-step N counts one step")
            continue
        if len(marked) > 1 or profiler_step is not None:  # one rank alone: nothing restricted, nothing to say
            lines.append(f"{side}: steps counted {keep} "
                         + (f"(selected; ranks {ranks})" if profiler_step is not None
                            else f"(covered by every rank with step markers: ranks {ranks})"))
        lines += _leave_out_unwindowed(w, [r for r in mine if not r.step_counts.per_step], side, keep, ranks)
        for r in marked:
            r.steps_kept = keep
            drop = sorted(set(r.step_counts.per_step) - set(keep))
            if not drop and profiler_step is None:
                r.info.append(f"step(s) {keep} counted ({r.marks.source})")
            if drop or profiler_step is not None:
                kept, _dropped = restrict(w.con, r.files, set(keep), drop_outside=profiler_step is not None)
                calls = sum(n for s, n in r.step_counts.per_step.items() if s not in keep)
                r.kernels = kept
                r.notes.append(f"steps counted {keep} ({r.marks.source})" + (f"; step(s) {drop} not covered by every rank: "
                                                          f"{calls} kernel call(s) left out" if drop else "")
                               + ("; kernels outside the step left out" if profiler_step is not None else ""))
    return lines


def _leave_out_unwindowed(w, unmarked: List[CaptureResult], side: str, keep: List[int], ranks: str) -> List[str]:
    """A rank without step markers beside ranks restricted to steps ``keep``: its kernels cannot be limited to
    those steps (counted whole they would hold every step it captured), so it is left out — its kernel rows
    dropped, status ``evidence_missing`` with the reason — and one line says so."""
    lines = []
    for r in unmarked:
        restrict(w.con, r.files, set(), drop_outside=True)
        r.kernels, r.status = 0, CaptureStatus.EVIDENCE_MISSING
        why = (f"no step markers while {side} ranks {ranks} count steps {keep}: its kernels cannot be limited to "
               "those steps, so this rank is left out (collect it with the same profiler schedule)")
        r.notes = [n for n in r.notes if not n.startswith("no step markers")]
        r.reason = "; ".join(x for x in [r.reason, why] if x)
        lines.append(f"{side}: rank {r.capture.rank} left out: {why}")
    return lines


def step_row(r: CaptureResult) -> Dict:
    sc = r.step_counts
    if not sc.per_step:
        return {"step_source": r.marks.source or None}
    return {"step_source": r.marks.source, "steps": json.dumps({str(k): v for k, v in sorted(sc.per_step.items())}),
            "kernels_outside_steps": sc.outside, "open_tail_kernels": sc.tail,
            "steps_kept": json.dumps(r.steps_kept) if r.steps_kept is not None else None}
