"""Execution order of boundaries, from the dumps' call order (``construct.json``), not the map's list order.

msprobe writes ``construct.json`` keys in call order (each entry with its parent) and ``dump.json`` in
completion order (source: shared/reference/msprobe-format.md; msprobe 26.x). A boundary's tensor
exists at a *time*: an input or parameter when its entry is called, an output when its entry
completes. Completion times follow from the call order and the parents: an entry completes when the
next call is not one of its descendants (a call stack replayed over the keys).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from tilake.diagnosis import selectors as S
from tilake.ingest.msprobe.reader import DumpSide
from tilake.models.boundary_maps import Boundary


def event_times(dump: DumpSide) -> Tuple[Dict[str, int], Dict[str, int]]:
    """``(call_time, done_time)`` per entry, on one clock.

    Without ``construct.json`` (no parents) dump.json's completion order is the only order: both
    times are the entry's position there.
    """
    call: Dict[str, int] = {}
    done: Dict[str, int] = {}
    if not dump.parents:
        for k in dump.entries:
            call[k] = done[k] = dump.order[k]
        return call, done
    t = 0
    stack: List[str] = []
    open_: set = set()

    def close_until(parent: Optional[str]) -> None:
        nonlocal t
        while stack and stack[-1] != parent:
            k = stack.pop()
            open_.discard(k)
            done[k] = t
            t += 1

    for k, p in dump.parents.items():
        if p is None or p in open_:
            close_until(p)
        call[k] = t
        t += 1
        stack.append(k)
        open_.add(k)
    close_until(None)
    for k in dump.entries:  # entries construct.json lacks: after it, in dump.json order
        if k not in call:
            call[k] = done[k] = t + dump.order[k]
    return call, done


def _time(view: S.SideView, b: Boundary, side: str, times) -> Optional[int]:
    """When the boundary's tensor exists on ``side`` (the latest of its slots), or None."""
    try:
        res = S.resolve(view, b.spec.get(side), side)
    except S.Unavailable:
        return None
    call, done = times
    ts = [(done if sl.io == "output" else call).get(sl.entry) for sl in res.slots]
    return None if any(x is None for x in ts) else max(ts)


def order_boundaries(boundaries: List[Boundary], views: Dict[str, S.SideView], ref: str) -> Tuple[List[Boundary], List[str]]:
    """Boundaries sorted by one side's execution order, positions renumbered; plus notes.

    The side is the one on which more boundaries resolve (the reference side on a tie). A boundary
    that does not resolve there keeps its place after its predecessor in the map; equal times (one
    fused tensor feeding several boundaries) keep the map's order.
    """
    other = "infer" if ref == "train" else "train"
    times = {s: event_times(views[s].dump) for s in (ref, other)}
    per_side = {s: [_time(views[s], b, s, times[s]) for b in boundaries] for s in (ref, other)}
    side = max((ref, other), key=lambda s: (sum(x is not None for x in per_side[s]), s == ref))
    keys, last = [], -1
    for i, t in enumerate(per_side[side]):
        if t is None:
            keys.append((last, 1, i))
        else:
            keys.append((t, 0, i))
            last = max(last, t)
    order = sorted(range(len(boundaries)), key=lambda i: keys[i])
    notes: List[str] = []
    if order != list(range(len(boundaries))):
        moved = [(boundaries[i].name, boundaries[j].name) for i, j in zip(order, order[1:]) if i > j]
        eg = "; ".join(f"{a} runs before {b}" for a, b in moved[:3])
        notes.append(f"boundaries ordered by the {side} dump's execution order (construct.json), not the map's "
                     f"list order ({len(moved)} out of order: {eg})")
    return [dataclasses.replace(boundaries[i], position=n) for n, i in enumerate(order)], notes
