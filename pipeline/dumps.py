"""Implementation of the ``tilake dumps`` commands (the CLI bodies stay thin).

* :func:`run_probe` — naming patterns of each side (``dumps probe``).
* :func:`run_analyze` — round 0 (+ stub rounds) → output files, optionally the lake and marts.
* :func:`run_stub_prepare` — write the tensors a stub instruction needs where msprobe ``load`` reads them.
* :func:`map_names` — the shipped boundary maps (``dumps maps``).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M
from tilake.diagnosis import outputs as O
from tilake.diagnosis.logprob import read_logprob
from tilake.diagnosis.outputs import UNKNOWN
from tilake.diagnosis.suggest import exit_status
from tilake.errors import TilakeError
from tilake.files import atomic_write_json
from tilake.lake.dump_records import (
    Collection,
    DumpJoin,
    DumpPoint,
    DumpSummary,
    Pairing,
    ProbeReport,
    TaskCard,
)
from tilake.lake.store import Lake
from tilake.lake.warehouse import build_swapped
from tilake.models.boundary_maps import BoundaryMap
from tilake.progress import label_callback
from tilake.reports.progress_console import steps_bar

# the dump marts (their folder is the selector); dbt_build adds their ancestors (staging/msprobe, runs)
# the dump marts and every mart `tilake runs` (lake.registry) and the dump trends read: a --build
# leaves the warehouse current for them (registry.warehouse_is_current trusts the file's mtime)
DUMP_MODELS = ["path:models/marts/dumps", "fct_run_registry", "fct_run_divergence", "fct_change_divergence",
               "fct_change_divergence_any"]


def write_dump_outputs(an: "A.Analysis", card: TaskCard, out_dir: Path,
                       charts: bool = True, join: Optional[DumpJoin] = None) -> Dict[str, Path]:
    """Write the analysis' JSON outputs, then render the reports from ``report_source.json`` (and
    ``join``, the profile ⋈ dump facts of :func:`profile_join`; None: not in a lake).

    Returns:
        output name → path (``task_card``, ``boundary_results``, ``stub_instruction``,
        ``report_source``, the rendered ``alignment_report.{md,html}`` with charts and
        ``boundary_results_{csv,xlsx}``).

    Raises:
        TilakeError: the report templates are missing (install problem).
    """
    from tilake.reports.dumps_report import render_reports
    from tilake.reports.tables import write_boundary_tables

    src = O.report_source(an, card)
    paths = O.write_outputs(an, card, Path(out_dir), src=src)
    paths.update(render_reports(src, Path(out_dir), charts=charts, join=join))
    paths.update(write_boundary_tables(src, Path(out_dir)))  # boundary_results.csv / .xlsx
    return paths


def profile_join(lake: Lake, run_id: str) -> DumpJoin:
    """The profile ⋈ dump facts of ``run_id`` for the dump report, read from the warehouse's
    ``fct_boundary_kernels`` (:func:`tilake.reports.alignment.dump_join_facts`): ``joined`` when the lake
    holds a profile of the same run, step, rank and model, else ``refused`` with the reason, or
    ``no_profile`` (also when the lake has no warehouse yet)."""
    from tilake.reports.alignment import dump_join_facts

    if not (lake.root / "warehouse.duckdb").is_file():
        return dict(dump_join_facts(None, run_id), status="no_profile", reason="the lake has no warehouse yet")
    with lake.reading(raw=False) as con:
        return dump_join_facts(con, run_id)


def pairing_of(request_index: Optional[int] = None, request_tokens: Optional[Tuple[int, int]] = None,
               cu_seqlens: Optional[Sequence[int]] = None) -> Pairing:
    """The request pairing of ``--request-index`` / ``--request-tokens START:END`` / ``--cu-seqlens``.

    Raises:
        TilakeError: END not after START.
    """
    pairing: Pairing = {}
    if request_index is not None:
        pairing["request_index"] = int(request_index)
    if request_tokens and int(request_tokens[1]) <= int(request_tokens[0]):
        raise TilakeError(f"--request-tokens {request_tokens[0]}:{request_tokens[1]}: END must be after START")
    if request_tokens:
        pairing["request_tokens"] = [int(request_tokens[0]), int(request_tokens[1])]
    if cu_seqlens:
        pairing["cu_seqlens"] = [int(x) for x in cu_seqlens]
    return pairing


def task_card_of(rin: "A.RoundInput", bmap: BoundaryMap, pairing: Pairing,
                 facts: Optional[Mapping[str, Union[str, int, float]]] = None) -> TaskCard:
    """The task card of round 0's pair (``--card`` facts over what the dumps say) with what
    canonicalisation did per side (TP merge / PP join / token selection).

    Raises:
        TilakeError: unreadable dumps (:class:`tilake.diagnosis.pair.Pair`).
    """
    pair0 = A.Pair(rin.train, rin.infer, bmap, pairing)
    card = O.task_card(pair0.dumps["train"], pair0.dumps["infer"], dict(facts or {}))
    card["canonical"] = list(pair0.canonical)
    return card


def observe(card: TaskCard, an: "A.Analysis") -> None:
    """Add ``observed`` to the task card (in place): token rows per side (dim 0 of the first read
    boundary after the map's transforms) and layers per side, ``unknown`` when nothing was read."""
    first = next((r for r in an.boundary_rows if r["round"] == 0 and r.get("train_shape")), None)
    card["observed"] = {
        "token_rows": ({s: (first.get(f"{s}_shape") or [None])[0] for s in ("train", "infer")} if first
                       else UNKNOWN),
        "source": (f"dim 0 of boundary {first['boundary']} after the map's transforms" if first else
                   "no boundary could be read"),
        "layers": {s: an.sides.get(s, {}).get("layers", UNKNOWN) for s in ("train", "infer")},
    }


def run_probe(train: Optional[Path], infer: Optional[Path], out: Optional[Path] = None) -> ProbeReport:
    """Probe the given sides; writes JSON to ``out`` when given. Returns the :class:`ProbeReport`."""
    from tilake.ingest.msprobe.probe import probe

    if train is None and infer is None:
        raise TilakeError("give --train and/or --infer")
    res = probe(train, infer)
    if out:
        atomic_write_json(out, res)
    return res


def run_analyze(train: Path, infer: Path, out_dir: Path, *, map_name: str = "auto",
                rounds: Sequence[Tuple[Path, Path]] = (), card: Optional[Mapping[str, Union[str, int, float]]] = None,
                request_index: Optional[int] = None, cu_seqlens: Optional[Sequence[int]] = None,
                logprob_json: Optional[Path] = None, lake_path: Optional[Path] = None,
                run_id: Optional[str] = None, build: bool = False, charts: bool = True,
                show_progress: bool = True, request_tokens: Optional[Tuple[int, int]] = None,
                rl_step: Optional[int] = None, collection: Optional[Collection] = None) -> DumpSummary:
    """Analyse a pair (+ stub rounds) and write every output. Returns the :class:`DumpSummary`.

    Args:
        card: task-card facts given by the user (``--card key=value``, parsed by the CLI).
        cu_seqlens: packed-sequence boundaries (``--cu-seqlens 0,5,13``).
        request_tokens: ``(start, end)`` rows of the request in a token-major batch.
        run_id: also write the analysis into the lake (``lake_path``); ``build``: then build the
            dump marts through the warehouse door (:func:`tilake.lake.warehouse.build_swapped`).
            The lake's door (:meth:`Lake.writing`) is held once, from the lake write to the build.
        rl_step: the RL step the dumps were collected at (verl's precision tool writes ``step_<N>/<stage>/`` and
            msprobe its own counter ``step0`` under it): written as the task card's ``dumps.<side>.step`` (the
            step the profile ⋈ dump join matches), msprobe's counter kept as ``msprobe_step``; None: msprobe's.
        collection: how the dumps were collected (``tilake scan --dump``: rounds, stop reason), kept as the task
            card's ``collection`` (in ``task_card.json``, ``report_source.json`` and the lake's ``dump_runs``).
    Raises:
        TilakeError: bad dumps, bad map, bad options (``build`` without ``run_id``), lake busy,
        dbt failure.
    """
    if build and not run_id:
        raise TilakeError("--build needs --run-id (the marts are built from the lake)")
    pairing = pairing_of(request_index, request_tokens, cu_seqlens)
    logprob = read_logprob(Path(logprob_json)) if logprob_json else None
    bmap, map_note = resolve_map(map_name, Path(train), Path(infer), pairing)
    rins = [A.RoundInput(Path(train), Path(infer))] + [A.RoundInput(Path(a), Path(b)) for a, b in rounds]
    card = task_card_of(rins[0], bmap, pairing, card)
    if rl_step is not None:
        for side in card["dumps"].values():
            side["msprobe_step"], side["step"] = side["step"], int(rl_step)
    if collection:
        card["collection"] = collection
    lake = Lake(lake_path) if run_id else None
    with contextlib.ExitStack() as held:
        if lake is not None:   # first: a read-only or busy lake is said before the analysis, not after it
            held.enter_context(lake.writing())   # one lock, one ensure: lake rows, then the dump marts
        with steps_bar(show_progress) as prog:
            cb = label_callback(prog) if show_progress else None
            an = A.analyze_pair(rins, bmap, pairing, card, cb, logprob)
            if map_note:
                an.notes.insert(0, map_note)
            written = {}
            if lake is not None:
                from tilake.diagnosis.lake_rows import write_lake

                written = write_lake(lake, run_id, an, rins, card, cb)
        observe(card, an)
        res = build_swapped(lake, select=DUMP_MODELS) if build else None
        built = len(res.nodes) if res is not None else None
        join = profile_join(lake, run_id) if lake is not None and (res is None or res.success) else None
        paths = write_dump_outputs(an, card, Path(out_dir), charts=charts, join=join)
        if res is not None:
            res.raise_if_failed("dbt build of the dump marts failed")
    fd = an.rounds[0]["first_divergence"] if an.rounds else {}
    return DumpSummary(an.verdict, an.consistency, an.verdict_reason,
                       first_divergence=fd.get("boundary") or fd.get("reason"),
                       points=[DumpPoint(p["round"], p["boundary"], p["class"]) for p in an.points],
                       stub_needed=bool((an.stub_instruction or {}).get("needed")),
                       outputs={k: str(v) for k, v in paths.items()}, lake_rows=written, dbt_nodes=built,
                       profile_join={k: (join or {}).get(k) for k in ("status", "reason")} if join else None,
                       suggestions=[x["text"] for x in an.suggestions],
                       warnings=[n for n in an.notes if "than dump.json declares" in n],
                       exit_code=exit_status(an))


def resolve_map(map_name: str, train: Path, infer: Path, pairing: Optional[Pairing] = None):
    """The boundary map to use and a note saying how it was chosen (``auto``: :func:`choose_map`).

    Raises:
        TilakeError: an unknown map name, unreadable dumps.
    """
    if map_name != "auto":
        return M.load_map(map_name), None
    from tilake.diagnosis.suggest import choose_map

    name, scores = choose_map(train, infer, pairing)
    top = ", ".join(f"{x.map} {x.resolvable}/{x.total}{' (detected)' if x.detected else ''}" for x in scores[:3])
    return M.load_map(name), (f"boundary map chosen by --map auto: {name} (boundaries resolving on both dumps: "
                              f"{top}; pass --map NAME to force one)")


def map_names() -> List[str]:
    """Names of the boundary maps shipped in ``models/`` (``dumps analyze --map NAME``)."""
    return [p.stem for p in M.list_maps()]


class StubPrepared(NamedTuple):
    """What :func:`run_stub_prepare` wrote."""

    # the source tensor files (``<out>/load_source/…``)
    files: List[str]
    # the msprobe config whose ``load.path`` points at them (``<out>/msprobe_config.json``)
    config: str


def run_stub_prepare(train: Path, infer: Path, instruction: Path, out_dir: Path, *,
                     map_name: str = "auto") -> StubPrepared:
    """Write the stub's source tensors + an msprobe ``config.json`` whose ``load.path`` points at them.

    Raises:
        TilakeError: unreadable instruction, instruction not applicable, unreadable source tensors.
    """
    try:
        instr = json.loads(Path(instruction).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:   # ValueError: bad JSON or not UTF-8
        raise TilakeError(f"cannot read stub instruction: {str(exc)[:200] or type(exc).__name__}", path=instruction) from exc
    if not isinstance(instr, dict):
        raise TilakeError("the stub instruction is not a JSON object (write it with tilake dumps analyze)",
                          path=instruction)
    if not instr.get("needed"):
        raise TilakeError("the stub instruction says no further round is needed: " + str(instr.get("reason")),
                          path=instruction)
    bmap, _note = resolve_map(map_name, Path(train), Path(infer))
    pair = A.Pair(Path(train), Path(infer), bmap)
    out_dir = Path(out_dir).resolve()
    files = A.prepare_stub_source(pair, instr, out_dir / "load_source")
    cfg = dict(instr["msprobe_config"])
    cfg["load"] = dict(cfg["load"], path=str(out_dir / "load_source"))
    cfg["dump_path"] = str(out_dir / f"round{instr['round']}_dump")
    atomic_write_json(out_dir / "msprobe_config.json", cfg)
    return StubPrepared([str(f) for f in files], str(out_dir / "msprobe_config.json"))
