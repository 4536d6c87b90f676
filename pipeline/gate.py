"""``tilake dumps gate``: the bitwise acceptance gate of a train/infer dump pair, for CI.

The pair is analysed as ``tilake dumps analyze`` does (round 0: :func:`tilake.diagnosis.analyze.analyze_pair`
through the same map, pairing and task card), then gated by :func:`tilake.diagnosis.gate.evaluate`. With
``run_id`` the analysis and the gate row (``dump_gates``) are written into the lake, one door held from
the first write to the build; with ``out_dir`` the analysis' outputs and ``gate.json`` are written there.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Mapping, Optional, Sequence, Tuple, Union

from tilake.diagnosis import analyze as A
from tilake.diagnosis import gate as G
from tilake.errors import TilakeError
from tilake.files import atomic_write_json, check_out_dir
from tilake.lake.gate_records import Budget, GateResult
from tilake.lake.store import Lake
from tilake.lake.warehouse import build_swapped
from tilake.pipeline.dumps import (
    DUMP_MODELS,
    observe,
    pairing_of,
    profile_join,
    resolve_map,
    task_card_of,
    write_dump_outputs,
)
from tilake.progress import label_callback
from tilake.reports.progress_console import steps_bar


def run_gate(train: Path, infer: Path, *, map_name: str = "auto", budget: Optional[Path] = None,
             out_dir: Optional[Path] = None, lake_path: Optional[Path] = None, run_id: Optional[str] = None,
             build: bool = False, card: Optional[Mapping[str, Union[str, int, float]]] = None,
             request_index: Optional[int] = None, request_tokens: Optional[Tuple[int, int]] = None,
             cu_seqlens: Optional[Sequence[int]] = None, charts: bool = True,
             show_progress: bool = True) -> GateResult:
    """Analyse round 0 of ``train``/``infer`` and gate it; returns the :class:`GateResult` (``exit_code``
    0 only when every mapped boundary is bitwise equal or within its budget).

    Args:
        budget: ULP budget file (:func:`tilake.diagnosis.gate.read_budget`); None: bitwise only.
        out_dir: also write the analysis' outputs (report_source.json, reports, CSV) and ``gate.json``.
        run_id: also write the analysis and the gate row into the lake at ``lake_path``; ``build``: then
            build the dump marts (``fct_dump_gates`` among them) so trends see the gate.
    Raises:
        TilakeError: bad budget file (read before the dumps), bad map, unreadable dumps, ``build``
            without ``run_id``, an output folder inside the lake, lake busy, dbt failure.
    """
    if build and not run_id:
        raise TilakeError("--build needs --run-id (the marts are built from the lake)")
    bud = G.read_budget(Path(budget)) if budget else Budget()
    pairing = pairing_of(request_index, request_tokens, cu_seqlens)
    bmap, map_note = resolve_map(map_name, Path(train), Path(infer), pairing)
    lake = Lake(lake_path) if run_id else None
    if out_dir is not None:
        check_out_dir(Path(out_dir), lake.root if lake is not None else None, create=False)
    rins = [A.RoundInput(Path(train), Path(infer))]
    task_card = task_card_of(rins[0], bmap, pairing, card)
    with contextlib.ExitStack() as held:
        if lake is not None:
            held.enter_context(lake.writing())
        with steps_bar(show_progress) as prog:
            cb = label_callback(prog) if show_progress else None
            an = A.analyze_pair(rins, bmap, pairing, task_card, cb)
            if map_note:
                an.notes.insert(0, map_note)
            res = G.evaluate(an, bmap, bud)
            if lake is not None:
                from tilake.diagnosis.lake_rows import write_lake

                # the analysis' tables and the gate row in one commit
                res.lake_rows = dict(write_lake(lake, run_id, an, rins, task_card, cb,
                                                extra=lambda w: w.write_rows("dump_gates", [res.lake_row()])))
        observe(task_card, an)
        built = build_swapped(lake, select=DUMP_MODELS) if build else None
        res.dbt_nodes = len(built.nodes) if built is not None else None
        if out_dir is not None:
            join = profile_join(lake, run_id) if lake is not None and (built is None or built.success) else None
            paths = write_dump_outputs(an, task_card, Path(out_dir), charts=charts, join=join)
            res.outputs = {k: str(v) for k, v in paths.items()}
            res.outputs["gate"] = str(Path(out_dir) / "gate.json")
            atomic_write_json(Path(out_dir) / "gate.json", res.to_dict())
        if built is not None:
            built.raise_if_failed("dbt build of the dump marts failed")
    return res
