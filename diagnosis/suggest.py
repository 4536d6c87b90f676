"""When no boundary could be compared: the fixes the dumps themselves point to.

Only names are resolved (no tensor is loaded): the map's selectors against both sides as given,
against the sides swapped, and every shipped map against the sides as given. A candidate is offered
when it resolves more boundaries on both sides than the map used.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from tilake.diagnosis import selectors as S
from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import DumpSide
from tilake.lake.dump_records import Pairing
from tilake.models.boundary_maps import SIDES, expand, list_maps, load_map
from tilake.vocab import NOT_COMPARED, SKIPPED, ExitCode

# exit status of ``tilake dumps analyze`` when no boundary could be compared (outputs are written)
EXIT_NOTHING_COMPARED = ExitCode.EVIDENCE_MISSING


def exit_status(an) -> int:
    """Exit status of ``tilake dumps analyze`` for an :class:`~tilake.diagnosis.result.Analysis`:
    :data:`EXIT_NOTHING_COMPARED` when no boundary could be compared, else 0 (a finding is not an error)."""
    compared = [r for r in an.boundary_rows if r["status"] not in NOT_COMPARED + SKIPPED]
    if (an.api_sequence or {}).get("aligned"):   # an L1 dump: its API calls were compared by statistics
        return ExitCode.DONE
    return EXIT_NOTHING_COMPARED if an.boundary_rows and not compared else ExitCode.DONE


def _views(bmap: dict, dumps: Dict[str, DumpSide]) -> Tuple[Dict[str, S.SideView], int]:
    """Both sides seen through the map's naming rules, and the layer count (at least 1)."""
    views = {s: S.SideView(dumps[s], ((bmap.get("sides") or {}).get(s) or {}).get("strip_segments") or [])
             for s in SIDES}
    pat = (bmap.get("layers") or {}).get("pattern")
    pats = pat if isinstance(pat, dict) else {s: pat for s in SIDES}
    return views, max([views[s].layer_count(pats[s]) if pats.get(s) else 0 for s in SIDES] + [1])


def resolvable(bmap: dict, dumps: Dict[str, DumpSide]) -> int:
    """How many of the map's boundaries (layers expanded) resolve on both sides."""
    views, n_layers = _views(bmap, dumps)
    n = 0
    for b in expand(bmap, n_layers):
        if b.optional:   # architecture-dependent (q_norm): neither counts for nor against a map
            continue
        try:
            for s in SIDES:
                S.resolve(views[s], b.spec.get(s), s)
        except S.Unavailable:
            continue
        n += 1
    return n


# the map ``--map auto`` falls back to on a tie (the documented default before auto existed)
DEFAULT_MAP = "qwen3_hf_vllm"


def _detects(bmap: dict, dumps: Dict[str, DumpSide]) -> bool:
    """True when the map's ``detect`` selectors (a module only that pairing has) resolve on their sides."""
    det = bmap.get("detect") or {}
    if not det:
        return False
    for s, sel in det.items():
        view = S.SideView(dumps[s], ((bmap.get("sides") or {}).get(s) or {}).get("strip_segments") or [])
        try:
            S.resolve(view, dict(sel, io="output", index=0), s)
        except S.Unavailable:
            return False
    return True


@dataclass(frozen=True)
class MapScore:
    """How well one shipped map fits a pair of dumps (:func:`choose_map`)."""

    map: str
    # boundaries (layers expanded, optional ones left out) resolving on both sides / all of them
    resolvable: int
    total: int
    # the map's ``detect`` module is present
    detected: bool
    score: float


def choose_map(train: Path, infer: Path, pairing: Optional[Pairing] = None) -> Tuple[str, List[MapScore]]:
    """``--map auto``: the shipped map whose boundaries resolve best on both dumps (names only, no tensor).

    Score = share of the map's boundaries (layers expanded) that resolve on both sides, plus 0.5 when its
    ``detect`` module is present (e.g. vLLM's one rotary module shared by every layer: the real engine). Ties
    go to :data:`DEFAULT_MAP`, then to the name order.

    Returns:
        (map name, :class:`MapScore` of every shipped map, best first).
    Raises:
        TilakeError: the dumps cannot be opened (as :func:`tilake.diagnosis.steps.open_sides`).
    """
    from tilake.diagnosis.steps import open_sides

    maps = {p.stem: load_map(str(p)) for p in list_maps()}
    dumps, _rec = open_sides(Path(train), Path(infer), maps.get(DEFAULT_MAP) or next(iter(maps.values())),
                             dict(pairing or {}))
    scores = []
    for name, bmap in maps.items():
        try:
            n = resolvable(bmap, dumps)
        except TilakeError:
            continue
        total = max(1, _expanded(bmap, dumps))
        det = _detects(bmap, dumps)
        scores.append(MapScore(name, n, total, det, round(n / total + (0.5 if det else 0.0), 6)))
    scores.sort(key=lambda x: (-x.score, x.map != DEFAULT_MAP, x.map))
    return (scores[0].map if scores else DEFAULT_MAP), scores


def _expanded(bmap: dict, dumps: Dict[str, DumpSide]) -> int:
    _views_, n_layers = _views(bmap, dumps)
    return len([b for b in expand(bmap, n_layers) if not b.optional])


def suggest_fixes(bmap: dict, dumps: Dict[str, DumpSide]) -> List[dict]:
    """Fixes for a pair where nothing could be compared, best first.

    Returns:
        ``[{"fix": "unsupported_framework" | "swap_sides" | "other_map", "text": str, "resolvable": int}]``
        (may be empty; an unsupported framework first).
    """
    base = resolvable(bmap, dumps)
    out = []
    for s in SIDES:
        cells = sum(1 for e in dumps[s].entries if e.startswith("Cell."))
        if cells:
            out.append({"fix": "unsupported_framework", "resolvable": -1,
                        "text": f"the {s} dump is MindSpore ({cells} Cell.* entries): not supported — tilake compares "
                                "PyTorch msprobe dumps (Module.* / API entries)"})
    swapped = resolvable(bmap, {"train": dumps["infer"], "infer": dumps["train"]})
    if swapped > base:
        out.append({"fix": "swap_sides", "resolvable": swapped,
                    "text": f"--train and --infer look swapped: with the sides exchanged {swapped} boundaries of "
                            f"the map resolve (now {base})"})
    used = Path(bmap.get("_path", "")).stem
    for p in list_maps():
        if p.stem == used:
            continue
        try:
            n = resolvable(load_map(str(p)), dumps)
        except TilakeError:
            continue
        if n > base:
            out.append({"fix": "other_map", "resolvable": n,
                        "text": f"--map {p.stem}: {n} of its boundaries resolve on these dumps (module names and "
                                f"classes match; the map used resolves {base})"})
    return sorted(out, key=lambda x: (x["fix"] != "unsupported_framework", -x["resolvable"]))
