"""Model configuration read from values: the RoPE base, the RMSNorm epsilon and the activation each side
actually ran, fitted from its own dumped tensors (never from names, shapes or a config file).

Why: a rollout whose config overrides ``rope_theta`` (or ``rms_norm_eps``, or ``hidden_act``) computes
different numbers from identical weights and inputs; the dump shows q/k equal before RoPE and different
after it, exact at position 0 and growing with position. Naming the cause needs the value each side used.

Notes:
    1. RoPE base: a side that dumps its cos/sin table (HF's rotary module: ``cos, sin = rotary_emb(x,
       position_ids)``, ``[1, S, D]``, halves repeated) is fitted on that table; a side that dumps the
       rotation's input and output (vLLM's rotary module: ``q_rot, k_rot = rotary_emb(positions, q, k)``,
       neox or interleaved pairs) on ``q``. The fit: the base ``B`` minimising the mean error of
       ``θ(p, j) = p · B^(−2j/D)`` over every dumped position and frequency (log grid 10…1e9, then golden
       section). A fit whose residual exceeds :data:`ROPE_FIT_MAX` (relative to the tensor scale) is
       "not a plain RoPE" (scaled, partial, another layout) and reads not checked.
    2. RMSNorm eps: each side's norm output recomputed from its input and weight for eps on a log grid
       (0, 1e-12…1e-2) in float64; the eps values whose error is within 10 % (plus one ULP) of the best form
       the interval that side's values allow. Disjoint intervals on the two sides = different eps; overlapping
       = no value shows a difference (eps below what the dtype can resolve is not identifiable, and said so).
    3. Activation: the act module's output recomputed from its input for silu / gelu / gelu_tanh / relu
       (a fused ``act(gate) * up`` on a ``[.., 2I]`` input); the best function per side.
    4. Each result: ``{"key", "train", "infer", "status": equal | differs | not_checked, "text"}``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from tilake.diagnosis.transforms import tensor_or_none

ROPE_FIT_MAX = 0.02      # best-fit mean error / mean |value| above which the rotation is not a plain RoPE
ROPE_SAME_REL = 0.01     # two fitted bases within 1 % are the same configuration value
EPS_GRID = [0.0] + [10.0 ** (e / 4) for e in range(-48, -7)]   # 0, 1e-12 … 1e-2 (quarter decades)


def _t(pair, side: str, sel: Any) -> Optional[torch.Tensor]:
    """The tensor a selector (or the first of a list of alternatives) names on a side, or None."""
    return tensor_or_none(pair.views[side], sel, side, pair.dims)


def _with(sel: dict, io: str, index: int) -> dict:
    return {k: v for k, v in sel.items() if k not in ("io", "index", "transforms")} | {"io": io, "index": index}


# ------------------------------------------------------------------------------ RoPE
def _golden(f: Callable[[float], float], lo: float, hi: float, iters: int = 60) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_base(err: Callable[[float], float]) -> Tuple[float, float]:
    """``(base, error)`` minimising ``err(log10 base)`` over 10…1e9 (grid of 161, then golden section)."""
    grid = [1 + 8 * i / 160 for i in range(161)]
    vals = [err(x) for x in grid]
    i = min(range(len(grid)), key=lambda k: vals[k])
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    best = _golden(err, lo, hi)
    return 10 ** best, err(best)


def rope_from_table(cos: torch.Tensor, sin: torch.Tensor, pos: torch.Tensor) -> Optional[Dict[str, Any]]:
    """Fit the base of a cos/sin table ``[.., S, D]`` (halves repeated, HF) at positions ``[.., S]``."""
    c, s = cos.reshape(-1, cos.shape[-1]).double(), sin.reshape(-1, sin.shape[-1]).double()
    p = pos.reshape(-1).double()
    if p.numel() != c.shape[0] or c.shape[-1] < 2:
        return None
    d = c.shape[-1]
    j = torch.arange(d // 2, dtype=torch.float64)

    def err(lb: float) -> float:
        inv = (10 ** lb) ** (-2 * j / d)
        th = p[:, None] * inv[None, :]
        return float(((torch.cos(th) - c[:, : d // 2]).abs() + (torch.sin(th) - s[:, : d // 2]).abs()).mean())

    base, e = fit_base(err)
    return {"base": base, "residual": e / 2, "source": "cos/sin table", "dim": d}


def rope_from_rotation(x: torch.Tensor, y: torch.Tensor, pos: torch.Tensor, head: int) -> Optional[Dict[str, Any]]:
    """Fit the base of a rotation ``y = rope(x)`` (``[T, H·head]``) at positions ``[T]``, neox or interleaved."""
    if x.shape != y.shape or head < 2 or x.shape[-1] % head:
        return None
    xs, ys = x.reshape(x.shape[0], -1, head).double(), y.reshape(y.shape[0], -1, head).double()
    p = pos.reshape(-1).double()
    if p.numel() != xs.shape[0]:
        return None
    j = torch.arange(head // 2, dtype=torch.float64)
    scale = float(ys.abs().mean()) or 1.0
    best = None
    for style in ("neox", "interleaved"):
        if style == "neox":
            x1, x2, y1, y2 = xs[..., : head // 2], xs[..., head // 2:], ys[..., : head // 2], ys[..., head // 2:]
        else:
            x1, x2, y1, y2 = xs[..., 0::2], xs[..., 1::2], ys[..., 0::2], ys[..., 1::2]

        def err(lb: float, x1=x1, x2=x2, y1=y1, y2=y2) -> float:
            th = p[:, None, None] * ((10 ** lb) ** (-2 * j / head))[None, None, :]
            c, s = torch.cos(th), torch.sin(th)
            return float(((x1 * c - x2 * s - y1).abs() + (x2 * c + x1 * s - y2).abs()).mean()) / scale

        base, e = fit_base(err)
        if best is None or e / 2 < best["residual"]:
            best = {"base": base, "residual": e / 2, "source": f"rotation input/output ({style})", "dim": head}
    return best


def _rope_side(pair, side: str, spec: dict) -> Optional[Dict[str, Any]]:
    if "cos" in spec:
        cos, sin, pos = (_t(pair, side, spec.get(k)) for k in ("cos", "sin", "positions"))
        if cos is None or sin is None or pos is None:
            return None
        return rope_from_table(cos, sin, pos)
    mod = spec.get("module")
    if not mod:
        return None
    sel = {k: v for k, v in spec.items() if k in ("module", "parent", "call", "parent_call")}
    pos = _t(pair, side, _with(sel, "input", 0))
    x = _t(pair, side, _with(sel, "input", 1))
    y = _t(pair, side, _with(sel, "output", 0))
    head = int(pair.dims.get("head_dim") or 0)
    if pos is None or x is None or y is None or not head:
        return None
    return rope_from_rotation(x, y, pos, head)


def check_rope(pair, spec: dict) -> Dict[str, Any]:
    """The RoPE base of each side, fitted from values (see the module docstring)."""
    fits = {s: _rope_side(pair, s, spec.get(s) or {}) for s in ("train", "infer")}
    out: Dict[str, Any] = {"key": "rope_theta", "train": None, "infer": None, "fits": fits}
    bad = [s for s, f in fits.items() if f is None or f["residual"] > ROPE_FIT_MAX]
    for s, f in fits.items():
        out[s] = None if s in bad else float(f"{f['base']:.4g}")
    if bad:
        why = "; ".join(f"{s}: " + ("rotary tensors not in the dump" if fits[s] is None else
                                    f"best plain-RoPE fit leaves {fits[s]['residual']:.2g} of the tensor scale "
                                    "(scaled / partial RoPE or another layout)") for s in bad)
        out.update(status="not_checked", text=f"rope_theta not checked by value — {why}")
        return out
    a, b = fits["train"]["base"], fits["infer"]["base"]
    same = abs(a - b) / max(a, b) <= ROPE_SAME_REL
    desc = (f"train {a:.3g} (fitted from its {fits['train']['source']}, residual {fits['train']['residual']:.1e}), "
            f"infer {b:.3g} (from its {fits['infer']['source']}, residual {fits['infer']['residual']:.1e})")
    out.update(status="equal" if same else "differs",
               text=(f"rope_theta equal by value: {desc}" if same else f"rope_theta {b:.3g} (infer) vs {a:.3g} "
                     f"(train): {desc}"))
    return out


# ------------------------------------------------------------------------------ RMSNorm eps
def eps_interval(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> Optional[Tuple[float, float, float]]:
    """``(lo, hi, best)`` of the eps values whose recomputed RMSNorm output is as close to ``y`` as the best."""
    if x.shape != y.shape or w.shape[-1] != x.shape[-1]:
        return None
    xd, wd, yd = x.double(), w.double(), y.double()
    ms = (xd * xd).mean(-1, keepdim=True)
    ulp = float(yd.abs().max()) * 2.0 ** -8
    errs = [float(((xd * torch.rsqrt(ms + e) * wd) - yd).abs().mean()) for e in EPS_GRID]
    best = min(errs)
    ok = [e for e, v in zip(EPS_GRID, errs) if v <= best * 1.1 + ulp * 1e-3]
    return min(ok), max(ok), EPS_GRID[errs.index(best)]


def check_eps(pair, spec: dict) -> Dict[str, Any]:
    """The RMSNorm eps interval each side's values allow (see the module docstring)."""
    iv: Dict[str, Any] = {}
    for s in ("train", "infer"):
        sel = spec.get(s) or {}
        x = _t(pair, s, _with(sel, "input", 0))
        w = _t(pair, s, {**_with(sel, "parameter", 0), "index": "weight"})
        y = _t(pair, s, _with(sel, "output", 0))
        iv[s] = eps_interval(x, w, y) if x is not None and w is not None and y is not None else None
    out: Dict[str, Any] = {"key": "rms_norm_eps", "train": None, "infer": None}
    if any(v is None for v in iv.values()):
        out.update(status="not_checked", text="rms_norm_eps not checked by value — the norm's input, weight or "
                                              "output is not in a dump")
        return out
    (tl, th, tb), (il, ih, ib) = iv["train"], iv["infer"]
    out.update(train=tb, infer=ib)
    if th < il or ih < tl:
        out.update(status="differs", text=f"rms_norm_eps differs by value: train allows [{tl:.1e}, {th:.1e}], infer "
                                          f"[{il:.1e}, {ih:.1e}] (norm output recomputed from each side's input)")
    else:
        out.update(status="equal", text=f"rms_norm_eps consistent by value: train allows [{tl:.1e}, {th:.1e}], infer "
                                        f"[{il:.1e}, {ih:.1e}] (overlap; values below what the dtype resolves are "
                                        "not identifiable)")
    return out


# ------------------------------------------------------------------------------ activation
ACTS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": torch.nn.functional.silu,
    "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
    "relu": torch.relu,
}


def best_activation(x: torch.Tensor, y: torch.Tensor) -> Optional[Tuple[str, float]]:
    """The activation that best maps ``x`` to ``y`` (``x`` of ``2·I`` channels for a fused ``act(gate)·up``)."""
    xd, yd = x.double(), y.double()
    if xd.shape[-1] == 2 * yd.shape[-1]:
        gate, up = xd[..., : yd.shape[-1]], xd[..., yd.shape[-1]:]
        cand = {n: f(gate) * up for n, f in ACTS.items()}
    elif xd.shape == yd.shape:
        cand = {n: f(xd) for n, f in ACTS.items()}
    else:
        return None
    scale = float(yd.abs().mean()) or 1.0
    errs = {n: float((c - yd).abs().mean()) / scale for n, c in cand.items()}
    n = min(errs, key=errs.get)
    return n, errs[n]


def check_activation(pair, spec: dict) -> Dict[str, Any]:
    """The activation each side ran, fitted from its act module's input and output."""
    fit: Dict[str, Any] = {}
    for s in ("train", "infer"):
        sel = spec.get(s) or {}
        x, y = _t(pair, s, _with(sel, "input", 0)), _t(pair, s, _with(sel, "output", 0))
        fit[s] = best_activation(x, y) if x is not None and y is not None else None
    out: Dict[str, Any] = {"key": "hidden_act", "train": None, "infer": None}
    if any(v is None or v[1] > 0.02 for v in fit.values()):
        out.update(status="not_checked", text="hidden_act not checked by value — the activation's input/output is "
                                              "not in a dump, or no known activation fits it")
        return out
    out.update(train=fit["train"][0], infer=fit["infer"][0])
    same = fit["train"][0] == fit["infer"][0]
    out.update(status="equal" if same else "differs",
               text=(f"hidden_act equal by value: both {fit['train'][0]}" if same else
                     f"hidden_act {fit['infer'][0]} (infer) vs {fit['train'][0]} (train), fitted from each act module"))
    return out


def check_configs(pair) -> List[Dict[str, Any]]:
    """Every configuration value the map's ``config_checks`` block names, checked by value (rope, eps, act)."""
    spec = pair.bmap.get("config_checks") or {}
    out = []
    for key, fn in (("rope", check_rope), ("norm", check_eps), ("act", check_activation)):
        if key in spec:
            try:
                out.append(fn(pair, spec[key]))
            except (RuntimeError, ValueError) as exc:   # a tensor of a layout the fit does not expect
                out.append({"key": key, "train": None, "infer": None, "status": "not_checked",
                            "text": f"{key} not checked by value — {type(exc).__name__}: {str(exc)[:160]}"})
    return out
