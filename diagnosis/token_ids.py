"""Token ids compared before any tensor: when the two sides were fed different tokens, that is the
first finding, and no boundary difference downstream is a kernel's.

The ids are the positional input 0 of the embedding boundary's module (the map's ``token_ids``
selectors when given, else the ``layer_input.first`` boundary — or the first ``op: embedding``
boundary — with ``io: input, index: 0`` and no transforms). Both sides are flattened (HF feeds
``[1, S]``, vLLM ``[S]``); ``pairing.request_tokens: [a, b]`` slices the longer inference side.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from tilake.diagnosis import selectors as S
from tilake.errors import TilakeError
from tilake.models.boundary_maps import SIDES

PSEUDO = "token_ids"  # the pseudo-boundary feeding the embedding in classification


def _selector(pair, side: str) -> Optional[dict]:
    given = (pair.bmap.get("token_ids") or {}).get(side)
    if given:
        return given
    first = (pair.bmap.get("layer_input") or {}).get("first")
    b = next((x for x in pair.boundaries if x.name == first), None) or \
        next((x for x in pair.boundaries if x.op == "embedding"), None)
    spec = (b.spec.get(side) if b else None) or {}
    if "module" not in spec:
        return None
    return {"module": spec["module"], "call": spec.get("call", 0), "io": "input", "index": 0}


def compare_token_ids(pair) -> Dict[str, Any]:
    """Compare the two sides' token ids.

    Returns:
        ``{"status": "equal" | "differ" | "evidence_missing", "positions": int, "differing": int,
        "first_differing": [int], "shift": int | None, "text": str}``; ``shift`` is k when ``infer[i] ==
        train[i + k]`` on the overlap (|k| ≤ 2).
    """
    ids: Dict[str, Any] = {}
    for s in SIDES:
        sel = _selector(pair, s)
        if sel is None:
            return _missing("the map names no embedding module to read token ids from")
        try:
            res = S.resolve(pair.views[s], sel, s)
            t = pair.dumps[s].load(res.slots[0])
        except (S.Unavailable, TilakeError) as exc:
            return _missing(f"{s} token ids not readable: {getattr(exc, 'reason', exc)}")
        if t.is_floating_point() or t.is_complex():
            return _missing(f"{s} embedding input 0 is {t.dtype}, not token ids")
        ids[s] = t.reshape(-1).long()
    tr, inf = ids["train"], ids["infer"]
    rng = pair.pairing.get("request_tokens")
    if rng and inf.numel() > tr.numel():
        inf = inf[int(rng[0]):int(rng[1])]
    if tr.numel() != inf.numel():
        return {"status": "differ", "positions": max(tr.numel(), inf.numel()), "differing": None,
                "first_differing": [], "shift": None,
                "text": f"token ids differ in length: train {tr.numel()}, infer {inf.numel()} "
                        "(one side holds more tokens: pass --request-tokens A:B)"}
    diff = (tr != inf).nonzero().reshape(-1)
    n, k = tr.numel(), int(diff.numel())
    if k == 0:
        return {"status": "equal", "positions": n, "differing": 0, "first_differing": [], "shift": None,
                "text": f"token ids equal at all {n} positions"}
    shift = next((d for d in (1, -1, 2, -2) if n > abs(d) and
                  bool((inf[:-d] == tr[d:]).all() if d > 0 else (inf[-d:] == tr[:d]).all())), None)
    how = f" (infer position i holds train token i{shift:+d}: shifted by {abs(shift)})" if shift else ""
    return {"status": "differ", "positions": n, "differing": k, "first_differing": diff[:8].tolist(), "shift": shift,
            "text": f"token ids differ at {k}/{n} positions{how}: the two sides were fed different tokens"}


def _missing(reason: str) -> Dict[str, Any]:
    return {"status": "evidence_missing", "positions": None, "differing": None, "first_differing": [],
            "shift": None, "text": f"token ids not compared: {reason}"}


def feed_embedding(rows: List[dict], by: Dict[str, dict], tid: Dict[str, Any]) -> None:
    """When the token ids differ, make them the (non-EXACT) input of the embedding rows (in place)."""
    if tid.get("status") != "differ":
        return
    by[PSEUDO] = {"boundary": PSEUDO, "status": "NOT_EXACT"}
    for r in rows:
        if r.get("op") == "embedding" and not r.get("inputs"):
            r["inputs"] = [PSEUDO]
