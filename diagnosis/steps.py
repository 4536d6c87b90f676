"""Several steps in one dump root: list what is there, never take the first silently.

msprobe writes an empty extra step after collection, and a warm-up forward is often dumped as
``step0`` with the real prefill as ``step1``. Per side: candidates = the root's ``step*/rank*|proc*``
folders (several ranks in one step are refused by the reader, naming them); empty steps (no entry)
and warm-ups (token ids all zero) are dropped with a note; when more than one candidate is left, the
pair of steps whose token ids match is used, else the analysis is refused naming the candidates.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from tilake.diagnosis import canonical as C
from tilake.diagnosis import selectors as S
from tilake.diagnosis.token_ids import read_ids
from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import DumpSide
from tilake.models.boundary_maps import SIDES


def _label(d) -> str:
    """``step0/rank0`` of a folder; of a side merged from several ranks ``step0/rank0+rank1``."""
    if not isinstance(d, Path):
        ranks = [r for rec in C.records_of(d) for r in (rec.detail.get("ranks") or [])]
        stages = [x for rec in C.records_of(d) for x in (rec.detail.get("stages") or [])]
        d, names = d.dir, "+".join(stages or ranks)
        if names:
            return f"{d.parent.name}/{names}" if d.parent.name.startswith("step") else names
    return f"{d.parent.name}/{d.name}" if d.parent.name.startswith("step") else d.name


def _layer_pattern(bmap: dict, side: str):
    pat = (bmap.get("layers") or {}).get("pattern")
    return pat.get(side) if isinstance(pat, dict) else pat


def _candidates(path: Path, side: str, bmap: dict) -> Tuple[List[Tuple[DumpSide, Any]], Dict[str, str]]:
    """Usable (side, token ids or None) of one side, and the dropped folders with why. A step's several
    ``rank*`` folders are opened as one model (:func:`tilake.diagnosis.canonical.open_step`)."""
    dropped: Dict[str, str] = {}
    out = []
    groups = C.step_groups(path)
    for _step, dirs in groups:
        d = dirs[0]
        try:
            ds = C.open_step(dirs, side, _layer_pattern(bmap, side))
        except TilakeError as exc:
            if "0 entries" in str(exc) and len(groups) > 1:  # a lone empty step keeps the reader's own message
                dropped[_label(d)] = "empty step (no entry dumped; msprobe writes one after collection)"
                continue
            raise
        strip = ((bmap.get("sides") or {}).get(side) or {}).get("strip_segments") or []
        ids = read_ids(S.SideView(ds, strip), bmap, side)
        if ids is not None and ids.numel() and not bool(ids.any()):
            dropped[_label(d)] = "warm-up (token ids all zero)"
            continue
        out.append((ds, ids))
    return out, dropped


def open_sides(train: Path, infer: Path, bmap: dict, pairing: Optional[dict] = None) -> Tuple[Dict[str, DumpSide], dict]:
    """The two :class:`DumpSide` objects to analyse and the record of the choice.

    Returns:
        (``{"train": DumpSide, "infer": DumpSide}``, ``{side: {"candidates": [...], "used": label,
        "dropped": {label: why}, "how": text}}``).
    Raises:
        TilakeError: a side with no usable step, or several candidates that token ids cannot tell
            apart (the message names them and how to pick one).
    """
    paths = {"train": Path(train), "infer": Path(infer)}
    cands, dropped = {}, {}
    for s in SIDES:
        cands[s], dropped[s] = _candidates(paths[s], s, bmap)
        if not cands[s]:
            raise TilakeError(f"{s} dump has no usable step ({'; '.join(f'{k}: {v}' for k, v in dropped[s].items())})",
                              path=paths[s])
    how = {s: "the only step" for s in SIDES}
    if len(cands["train"]) > 1 or len(cands["infer"]) > 1:
        rng = (pairing or {}).get("request_tokens")
        match = [(a, b) for a in cands["train"] for b in cands["infer"] if _same(a[1], b[1], rng)]
        if not match and not rng:
            chunked = _chunked(cands)
            if chunked is not None:
                s, joined, used = chunked
                pick = {s: joined, ("infer" if s == "train" else "train"): cands["infer" if s == "train" else "train"][0]}
                record = {x: {"candidates": [_label(c[0]) for c in cands[x]] + sorted(dropped[x]),
                              "used": "+".join(used) if x == s else _label(pick[x][0]), "dropped": dropped[x],
                              "how": ("consecutive steps of one chunked prefill (their token ids joined equal the "
                                      "other side's)" if x == s else "the only step")} for x in SIDES}
                return {x: pick[x][0] for x in SIDES}, record
        if len(match) != 1:
            names = {s: ", ".join(_label(c[0]) for c in cands[s]) for s in SIDES}
            raise TilakeError(f"several steps and token ids do not single out one pair "
                              f"({len(match)} matching): train has {names['train']}; infer has {names['infer']}",
                              hint="pass the step folder to analyse (e.g. --train <root>/step1)")
        pick = {"train": match[0][0], "infer": match[0][1]}
        how = {s: ("the only step left" if len(cands[s]) == 1 else "the step whose token ids match the other side")
               for s in SIDES}
    else:
        pick = {s: cands[s][0] for s in SIDES}
    record = {s: {"candidates": [_label(c[0]) for c in cands[s]] + sorted(dropped[s]),
                  "used": _label(pick[s][0]), "dropped": dropped[s], "how": how[s]} for s in SIDES}
    return {s: pick[s][0] for s in SIDES}, record


def _same(a, b, rng) -> bool:
    if a is None or b is None:
        return False
    if rng and b.numel() > a.numel():
        b = b[int(rng[0]):int(rng[1])]
    return a.numel() == b.numel() and bool((a == b).all())


def _chunked(cands: Dict[str, list]):
    """``(side, (joined side, ids), [step labels])`` when consecutive steps of one side hold one request's
    chunked prefill: their token ids, joined in step order, equal the other side's (flat, or one row of a
    padded batch); None otherwise. The longest such run wins."""
    import torch

    for s in SIDES:
        o = "infer" if s == "train" else "train"
        if len(cands[s]) < 2 or len(cands[o]) != 1 or cands[o][0][1] is None:
            continue
        other = cands[o][0][1]
        c = cands[s]
        for n in range(len(c), 1, -1):
            for a in range(0, len(c) - n + 1):
                run = c[a:a + n]
                if any(x[1] is None for x in run):
                    continue
                ids = torch.cat([x[1] for x in run])
                if ids.numel() == other.numel() and bool((ids == other).all()):
                    labels = [_label(x[0]) for x in run]
                    joined = C.join_chunks([x[0] for x in run], s, [x[1].numel() for x in run], labels)
                    return s, (joined, ids), labels
    return None
