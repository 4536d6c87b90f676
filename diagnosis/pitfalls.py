"""Named pitfalls of real train–infer dump comparisons, each a condition checked on values with its evidence.

Source: the public consistency-analysis notes of Megatron / vllm-ascend runs (2026;
``ZJCFCB/Training_Inference_skills``, ``consistency-dump-analysis/references/pitfalls.md``, items A1–A3) and
the collection side's failures this project met. Each check returns ``None`` (does not apply) or
``{"id", "name", "status": found | clear, "evidence": [...], "fix"}``; ``found`` changes what a result means.

* ``logits_shift`` (A1): a token-major sequence output (logits, lm_head input) whose rows are the other side's
  rolled by one position — vLLM computes prompt log-probs from ``[h₋₁, h₀, …, h_{L−2}]`` — reads as a huge
  difference. Detected by the row-correlation peak at shift ±1, confirmed by comparing after ``roll``.
* ``lm_head_by_shape`` (A2): the rollout's lm_head weight lives in a fused logits op, not under a named
  module; found by its shape ``[vocab, hidden]`` among every tensor slot of the dump and compared by value.
* ``logits_character`` (A3): a logits difference characterised before any stub: linear fit ``y = k·x + b``
  (k ≈ 1 and a rounding residual: a plain GEMM difference; k ≠ 1: temperature / scaling), row-sorted equality
  (a column permutation) and argmax agreement (same greedy token).
* ``norm_fused_into_gemm``: a norm fused into the next GEMM on one side only (Megatron's
  ``LayerNormColumnParallelLinear`` takes the *pre-norm* input): that side's "norm output" equals the other
  side's norm input.
* ``stub_not_effective``: a stub round whose loaded input is not the source tensor (msprobe ``load`` only
  warns on a shape/dtype mismatch); downstream boundaries of that round mean nothing.
* ``empty_step``: a dump step folder that came out empty (collection ran, nothing was dumped).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch

from tilake.diagnosis import selectors as S
from tilake.diagnosis.transforms import materialise
from tilake.errors import TilakeError
from tilake.models.boundary_maps import SIDES
from tilake.vocab import BoundaryStatus, RoundOutcome


def _tensors(pair, name: str) -> Optional[Dict[str, torch.Tensor]]:
    b = next((x for x in pair.boundaries if x.name == name), None)
    if b is None:
        return None
    out = {}
    for s in SIDES:
        try:
            res = S.resolve(pair.views[s], b.spec.get(s), s)
            t, _n = materialise(pair.views[s], res, pair.dims, dict(pair.pairing), None)
        except (S.Unavailable, TilakeError, RuntimeError):
            return None
        out[s] = t
    return out


def _rowcorr(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    a, b = a - a.mean(), b - b.mean()
    d = float(a.norm() * b.norm())
    return float((a * b).sum()) / d if d else 0.0


def logits_shift(pair, rows: List[dict]) -> Optional[Dict[str, Any]]:
    """A1: the sequence output rolled by one position on one side."""
    r = next((x for x in rows if x["boundary"] == "logits"), None)
    if r is None or r.get("status") not in (BoundaryStatus.NOT_EXACT, BoundaryStatus.DTYPE_DIFF):
        return None
    t = _tensors(pair, "logits")
    if t is None or t["train"].dim() < 2 or t["train"].shape != t["infer"].shape or t["train"].shape[0] < 3:
        return None
    a, b = t["train"].reshape(t["train"].shape[0], -1), t["infer"].reshape(t["infer"].shape[0], -1)
    n = a.shape[0]
    scores = {k: sum(_rowcorr(a[i], b[(i + k) % n]) for i in range(n)) / n for k in (-1, 0, 1)}
    best = max(scores, key=scores.get)
    if best == 0 or scores[best] < 0.99:
        return {"id": "logits_shift", "name": "prompt logprobs / logits shifted by one position", "status": "clear",
                "evidence": [f"row-correlation by shift: {', '.join(f'{k:+d}: {v:.4f}' for k, v in scores.items())} — "
                             "peak at 0"], "fix": None}
    rolled = torch.roll(b, -best, dims=0)
    same = torch.equal(rolled, a)
    diff = float((rolled.double() - a.double()).abs().max())
    agree = float((rolled.argmax(-1) == a.argmax(-1)).double().mean())
    return {"id": "logits_shift", "name": "prompt logprobs / logits shifted by one position", "status": "found",
            "evidence": [f"row-correlation by shift: {', '.join(f'{k:+d}: {v:.4f}' for k, v in scores.items())} — peak "
                         f"at {best:+d}", f"after roll({-best}) on the infer side: {'bitwise equal' if same else f'max |diff| {diff:.3g}'}, "
                         f"argmax agreement {agree:.1%}"],
            "fix": f"compare train_logits[p] with infer_logits[p{best:+d}] (vLLM's prompt logprob of token p+1 comes "
                   "from position p): the difference at 'logits' is the alignment, not the computation"}


def lm_head_by_shape(pair, weight_rows: List[dict]) -> Optional[Dict[str, Any]]:
    """A2: the rollout's lm_head weight found by shape ``[vocab, hidden]`` anywhere in its dump."""
    w = next((x for x in weight_rows if x["boundary"] == "lm_head.weight"), None)
    if w is None or w["status"] not in (BoundaryStatus.EVIDENCE_MISSING, BoundaryStatus.MISSING) \
            or (w.get("via_op") or {}).get("status") in ("reproduces", "does_not_reproduce"):
        return None
    b = next((x for x in pair.weights if x.name == "lm_head.weight"), None)
    try:
        res = S.resolve(pair.views["train"], b.spec.get("train"), "train") if b else None
        ref, _n = materialise(pair.views["train"], res, pair.dims, {}, None) if res else (None, None)
    except (S.Unavailable, TilakeError):
        return None
    if ref is None:
        return None
    d = pair.dumps["infer"]
    cands = [sl for sl in d.slots if sl.declared_shape and list(sl.declared_shape) == list(ref.shape)]
    if not cands:
        return None
    for sl in cands:
        try:
            t = d.load(sl)
        except TilakeError:
            continue
        if t.dtype == ref.dtype and torch.equal(t, ref):
            w["by_shape"] = {"entry": sl.entry, "io": sl.io, "index": sl.index}
            w.update(status=BoundaryStatus.EXACT, reason=f"found by shape in the infer dump: {sl.entry} {sl.io}.{sl.index}")
            return {"id": "lm_head_by_shape", "name": "lm_head inside a fused logits op, found by shape",
                    "status": "found", "evidence": [f"infer {sl.entry} {sl.io}.{sl.index} has the lm_head shape "
                                                    f"{list(ref.shape)} and equals the train lm_head bitwise"],
                    "fix": "lm_head.weight checked by value through the fused op's weight argument"}
    return {"id": "lm_head_by_shape", "name": "lm_head inside a fused logits op, found by shape", "status": "clear",
            "evidence": [f"{len(cands)} infer tensor(s) of the lm_head shape {list(ref.shape)} "
                         f"({cands[0].entry} {cands[0].io}.{cands[0].index}…), none equal to the train lm_head"],
            "fix": "no lm_head found by value: the rollout's lm_head is not dumped, or differs from the trainer's"}


def logits_character(pair, rows: List[dict]) -> Optional[Dict[str, Any]]:
    """A3: linear fit, row-sorted equality and argmax agreement of a differing logits boundary."""
    r = next((x for x in rows if x["boundary"] == "logits"), None)
    if r is None or r.get("status") != BoundaryStatus.NOT_EXACT:
        return None
    t = _tensors(pair, "logits")
    if t is None or t["train"].shape != t["infer"].shape:
        return None
    x, y = t["train"].double().flatten(), t["infer"].double().flatten()
    xm, ym = x.mean(), y.mean()
    vx = float(((x - xm) ** 2).sum())
    k = float(((x - xm) * (y - ym)).sum()) / vx if vx else 1.0
    b0 = float(ym - k * xm)
    resid = float((y - (k * x + b0)).abs().max())
    a2, b2 = t["train"].reshape(-1, t["train"].shape[-1]), t["infer"].reshape(-1, t["infer"].shape[-1])
    sorted_eq = bool(torch.equal(a2.sort(-1).values, b2.sort(-1).values))
    agree = float((a2.argmax(-1) == b2.argmax(-1)).double().mean())
    kind = ("a column permutation (row-sorted values equal)" if sorted_eq and not torch.equal(a2, b2) else
            "a plain GEMM / rounding difference" if abs(k - 1) < 1e-2 and r.get("class") == "rounding-level" else
            "a scaling (temperature / logit scale)" if abs(k - 1) >= 1e-2 else "not affine (post-processing)")
    return {"id": "logits_character", "name": "logits difference characterised", "status": "found",
            "evidence": [f"linear fit infer = {k:.5f}·train + {b0:.3g}, max residual {resid:.3g}",
                         f"row-sorted values {'equal' if sorted_eq else 'differ'}", f"argmax agreement {agree:.1%}"],
            "fix": f"reads as {kind}"}


def norm_fused_into_gemm(pair, rows: List[dict]) -> Optional[Dict[str, Any]]:
    """One side's norm output is the other side's norm *input*: the norm is fused into the next GEMM there."""
    by = {x["boundary"]: x for x in rows}
    for r in rows:
        if r.get("op") != "norm" or r.get("status") != BoundaryStatus.NOT_EXACT or not r.get("inputs"):
            continue
        src = by.get(r["inputs"][0])
        if src is None:
            continue
        t, u = _tensors(pair, r["boundary"]), _tensors(pair, src["boundary"])
        if t is None or u is None:
            continue
        for s, o in (("infer", "train"), ("train", "infer")):
            if t[s].shape == u[o].shape and torch.equal(t[s].to(u[o].dtype), u[o]):
                return {"id": "norm_fused_into_gemm", "name": "a norm fused into the next GEMM on one side only",
                        "status": "found",
                        "evidence": [f"{s}'s tensor at {r['boundary']} equals {o}'s {src['boundary']} (the norm's "
                                     "input) bitwise: that side's next GEMM takes the pre-norm hidden state"],
                        "fix": f"map {r['boundary']} on the {s} side to the fused op's internal norm (e.g. Megatron "
                               "LayerNormColumnParallelLinear): compare its output, not its input"}
    return None


def stub_not_effective(rounds: List[dict]) -> Optional[Dict[str, Any]]:
    """A stub round whose loaded input did not take effect."""
    bad = [r for r in rounds if r.get("outcome") == RoundOutcome.STUB_NOT_EFFECTIVE]
    if not bad:
        return None
    checks = [c for c in bad[0].get("stub_verification", {}).get("checks", []) if not c.get("equal")]
    return {"id": "stub_not_effective", "name": "a stub that did not take effect", "status": "found",
            "evidence": [f"round {bad[0]['round']}: {c['module']} input {c['input']} — {c.get('reason')}" for c in checks[:4]],
            "fix": "msprobe load only warns on a name/shape/dtype mismatch: check load.modules names the exact "
                   "Module.…forward.N entries and the source .pt matches the target's shape and dtype"}


def empty_step(pair) -> Optional[Dict[str, Any]]:
    """A dump step folder that came out empty on a side."""
    ev = [f"{s}: {label} — {why}" for s in SIDES for label, why in (pair.steps.get(s, {}).get("dropped") or {}).items()
          if "empty" in why]
    if not ev:
        return None
    return {"id": "empty_step", "name": "a dump step that came out empty", "status": "found", "evidence": ev,
            "fix": "the collection ran but msprobe dumped nothing for that step (step list, scope or rank filters)"}


def check_all(pair, rows: List[dict], rounds: List[dict], early: List[Dict[str, Any]] = ()) -> List[Dict[str, Any]]:
    """Every pitfall check that applies (the ``found`` ones first); ``early``: those run before the hypotheses
    (:func:`lm_head_by_shape`, which can check a weight)."""
    out = list(early)
    for fn, args in ((logits_shift, (pair, rows)), (logits_character, (pair, rows)), (norm_fused_into_gemm, (pair, rows)),
                     (stub_not_effective, (rounds,)), (empty_step, (pair,))):
        try:
            r = fn(*args)
        except (RuntimeError, ValueError, TilakeError):   # a tensor of a layout a check does not expect
            r = None
        if r is not None:
            out.append(r)
    return sorted(out, key=lambda p: p["status"] != "found")
