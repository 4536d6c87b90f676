"""Boundary maps (``models/*.yaml``): loading, layer expansion, selector resolution, transforms.

A map is data (see ``models/qwen3_hf_vllm.yaml`` for the documented format). This module turns
it into concrete :class:`Boundary` objects for a pair of dumps and produces, for one boundary
and one side, the comparable tensor.

API entries are selected by *structure* (the nth entry of an API name whose construct.json
parent is a given module), never by msprobe's global per-API call counter, which drifts between
implementations (source: shared/fixtures/dumps/README.md, "Traps").
"""
from __future__ import annotations

import ast
import copy
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

from tilake.errors import TilakeError
from tilake.ingest.msprobe.reader import MODULE_RE, DumpSide, Slot

MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
SIDES = ("train", "infer")


class Unavailable(Exception):
    """A boundary cannot be produced on a side (reason = evidence_missing / MISSING text)."""

    def __init__(self, reason: str, status: str = "evidence_missing") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def list_maps() -> List[Path]:
    """Boundary map files shipped in ``models/`` (YAML files with a top-level ``boundaries`` list;
    ``models/`` also holds other per-family knowledge, e.g. call-stack notes)."""
    out = []
    for p in sorted(MODELS_DIR.glob("*.yaml")):
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and isinstance(data.get("boundaries"), list):
            out.append(p)
    return out


def load_map(name_or_path: str) -> dict:
    """Load a boundary map by file path or by name (``qwen3_hf_vllm``) from ``models/``.

    Raises:
        TilakeError: file missing, invalid YAML, or missing ``boundaries``.
    """
    p = Path(name_or_path)
    if not p.is_file():
        cand = MODELS_DIR / (name_or_path if name_or_path.endswith(".yaml") else name_or_path + ".yaml")
        if not cand.is_file():
            names = ", ".join(x.stem for x in list_maps())
            raise TilakeError(f"boundary map {name_or_path!r} not found (shipped maps: {names})")
        p = cand
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise TilakeError(f"boundary map is not valid YAML: {str(exc).splitlines()[0]}", path=p)
    if not isinstance(data, dict) or not isinstance(data.get("boundaries"), list):
        raise TilakeError("boundary map has no 'boundaries' list", path=p)
    for key in ("boundaries", "weights"):
        for i, b in enumerate(data.get(key) or []):
            if not isinstance(b, dict) or not b.get("name"):
                raise TilakeError(f"{key}[{i}] has no name", path=p)
            for side in SIDES:
                if side not in b:
                    raise TilakeError(f"{key}[{i}] ({b['name']}) has no {side!r} selector "
                                      "(write null when that side has no such tensor)", path=p)
                sel = b[side]
                if sel is not None and not (isinstance(sel, dict) and ({"module", "api", "sum", "concat_last"} & set(sel))):
                    raise TilakeError(f"{key}[{i}] ({b['name']}) {side} selector needs module, api, sum or "
                                      "concat_last", path=p)
    data["_path"] = str(p)
    return data


# ------------------------------------------------------------------------------ expressions
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv}


def eval_expr(expr: Any, dims: Dict[str, int]) -> int:
    """Evaluate ``"q_size+2*kv_size"`` with the map's dims (ints, + - * //; nothing else).

    Raises:
        Unavailable: unknown dim name or unsupported syntax.
    """
    if isinstance(expr, int):
        return expr

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise Unavailable(f"dimension {node.id!r} unknown (not derivable from this dump)")
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise Unavailable(f"unsupported expression {expr!r} in boundary map")

    return int(ev(ast.parse(str(expr), mode="eval")))


# ------------------------------------------------------------------------------ naming
class SideView:
    """A dump side seen through a map's naming rules (segments stripped, e.g. FSDP wrappers).

    Attributes:
        side: the :class:`DumpSide`. norm: normalised entry name → original entry name.
    """

    def __init__(self, dump: DumpSide, strip_segments: List[str]) -> None:
        self.dump = dump
        self.strip = list(strip_segments or [])
        self.norm: Dict[str, str] = {}
        for e in dump.entries:
            self.norm.setdefault(self.normalise(e), e)
        for e in dump.parents:
            self.norm.setdefault(self.normalise(e), e)
        # (module path without class, call) → normalised entry, for "<path>.*" class wildcards
        self._by_path: Dict[Tuple[str, int], str] = {}
        for n in sorted(self.norm):
            m = MODULE_RE.match(n)
            if m and m.group("dir") == "forward":
                self._by_path.setdefault((m.group("path"), int(m.group("call"))), n)

    def normalise(self, name: str) -> str:
        """Remove the configured segments (``a._fsdp_wrapped_module.b`` → ``a.b``)."""
        parts = [p for p in name.split(".") if p not in self.strip]
        return ".".join(parts)

    def module_entry(self, module: str, call: int = 0) -> Optional[str]:
        """Original entry name of ``Module.<module>.forward.<call>`` or None.

        A trailing ``.*`` matches any class name (Megatron's TE and local specs name the same
        module with different classes).
        """
        if module.endswith(".*"):
            hit = self._by_path.get((module[:-2], int(call)))
            return self.norm[hit] if hit else None
        return self.norm.get(f"Module.{module}.forward.{call}")

    def layer_count(self, pattern: str) -> int:
        """1 + the largest ``{i}`` for which some module path contains ``pattern``."""
        rx = re.compile(re.escape("Module." + pattern).replace(r"\{i\}", r"(\d+)"))
        best = -1
        for n in self.norm:
            m = rx.match(n)
            if m:
                best = max(best, int(m.group(1)))
        return best + 1


def _subst(obj: Any, mapping: Dict[str, str]) -> Any:
    if isinstance(obj, str):
        for k, v in mapping.items():
            obj = obj.replace("{" + k + "}", v)
        return obj
    if isinstance(obj, list):
        return [_subst(x, mapping) for x in obj]
    if isinstance(obj, dict):
        return {k: _subst(v, mapping) for k, v in obj.items()}
    return obj


@dataclass
class Boundary:
    """One concrete boundary (layer placeholders expanded).

    Attributes:
        name, op (embedding | norm | matmul | elementwise | attention), inputs (names of the
        boundaries whose tensors feed this one), position (0-based, execution order),
        spec {side: selector or None}, stub {side: stub spec}, layer (int or None),
        reason_missing (text when a side is deliberately absent).
    """

    name: str
    op: str
    inputs: List[str]
    position: int
    spec: Dict[str, Optional[dict]]
    stub: Dict[str, dict] = field(default_factory=dict)
    layer: Optional[int] = None
    reason_missing: Optional[str] = None


def expand(bmap: dict, n_layers: int, key: str = "boundaries") -> List[Boundary]:
    """Expand a map's boundary (or ``weights``) list for ``n_layers`` layers, in execution order."""
    li = bmap.get("layer_input") or {}
    out: List[Boundary] = []
    items = bmap.get(key) or []
    # per-layer items are grouped: all per-layer items of layer 0, then layer 1, ...
    i = 0
    while i < len(items):
        if not items[i].get("per_layer"):
            out.append(_mk(items[i], {"last": str(n_layers - 1)}, None, li, len(out)))
            i += 1
            continue
        j = i
        while j < len(items) and items[j].get("per_layer"):
            j += 1
        for layer in range(n_layers):
            for it in items[i:j]:
                out.append(_mk(it, {"i": str(layer), "p": str(layer - 1), "last": str(n_layers - 1)},
                               layer, li, len(out)))
        i = j
    return out


def _mk(item: dict, mapping: Dict[str, str], layer: Optional[int], li: dict, pos: int) -> Boundary:
    item = copy.deepcopy(item)
    if layer is not None and li:
        first, nxt = li.get("first"), li.get("next")
        layer_input = first if layer == 0 else _subst(nxt, {"p": str(layer - 1)})
    else:
        layer_input = li.get("first") if li else None
    inputs = []
    for x in item.get("inputs") or []:
        if x == "{layer_input}":
            if layer_input:
                inputs.append(layer_input)
        else:
            inputs.append(_subst(x, mapping))
    return Boundary(
        name=_subst(item["name"], mapping), op=str(item.get("op", "unknown")), inputs=inputs,
        position=pos, spec={s: _subst(item.get(s), mapping) for s in SIDES},
        stub=_subst(item.get("stub") or {}, mapping), layer=layer,
        reason_missing=item.get("reason_missing"))


def resolve_dims(bmap: dict, views: Dict[str, SideView]) -> Tuple[Dict[str, int], List[str]]:
    """Read the map's ``dims`` from parameter shapes declared in dump.json.

    Returns:
        (dims, notes) — a dim that cannot be read is left out and noted.
    """
    dims: Dict[str, int] = {}
    notes: List[str] = []
    exprs = []
    for name, d in (bmap.get("dims") or {}).items():
        if isinstance(d, int):
            dims[name] = d
            continue
        if "expr" in d:
            exprs.append((name, d["expr"]))
            continue
        v = views.get(d.get("side", "train"))
        entry = v.module_entry(d["module"]) if v else None
        slot = v.dump.slot(entry, "parameter", d.get("parameter", "weight")) if entry else None
        if slot is None or not slot.declared_shape:
            notes.append(f"dim {name}: {d.get('module')} parameter not in the {d.get('side', 'train')} dump")
            continue
        dims[name] = int(slot.declared_shape[int(d.get("dim", 0))])
    for name, expr in exprs:
        try:
            dims[name] = eval_expr(expr, dims)
        except Unavailable as exc:
            notes.append(f"dim {name}: {exc.reason}")
    return dims, notes


# ------------------------------------------------------------------------------ selectors
@dataclass
class Resolved:
    """A selector resolved on one side: the slots to read and how to combine/transform them."""

    side: str
    slots: List[Slot]
    combine: Optional[str]
    accumulate: Optional[str]
    transforms: List[Any]
    description: str


def resolve(view: SideView, sel: Optional[dict], side: str) -> Resolved:
    """Find the slots a selector names on one side.

    Raises:
        Unavailable: the map has no selector for this side, or the dump lacks the entry.
    """
    if sel is None:
        raise Unavailable(f"the boundary map has no {side}-side tensor for this boundary")
    if "sum" in sel or "concat_last" in sel:
        key = "sum" if "sum" in sel else "concat_last"
        parts = [resolve(view, p, side) for p in sel[key]]
        slots = [s for p in parts for s in p.slots]
        return Resolved(side, slots, key, sel.get("accumulate"), list(sel.get("transforms") or []),
                        f"{key}(" + ", ".join(p.description for p in parts) + ")")
    io = sel.get("io", "output")
    index = str(sel.get("index", 0))
    if "api" in sel:
        parent = view.module_entry(sel["parent"], int(sel.get("parent_call", 0)))
        if parent is None:
            raise Unavailable(f"{side} dump has no module Module.{sel['parent']}.forward.0 "
                              f"(parent of {sel['api']})")
        kids = [k for k in view.dump.children(parent) if view.dump.api_name(k) == sel["api"]]
        nth = int(sel.get("nth", 0))
        if len(kids) <= nth:
            raise Unavailable(f"{side} dump has {len(kids)} {sel['api']} entries under {parent}; "
                              f"the map needs #{nth} (construct.json missing or API not dumped)")
        entry = kids[nth]
        desc = f"{entry} ({sel['api']} #{nth} under its parent)"
    else:
        entry = view.module_entry(sel["module"], int(sel.get("call", 0)))
        if entry is None:
            raise Unavailable(f"{side} dump has no entry Module.{sel['module']}.forward.{sel.get('call', 0)}")
        desc = entry
    slot = view.dump.slot(entry, io, index)
    if slot is None:
        raise Unavailable(f"{side} entry {entry} has no tensor {io}.{index}")
    return Resolved(side, [slot], None, None, list(sel.get("transforms") or []), f"{desc} {io}.{index}")


def materialise(view: SideView, res: Resolved, dims: Dict[str, int], context: Optional[dict] = None,
                other=None) -> Tuple[Any, List[str]]:
    """Load and transform a resolved selector's tensor(s).

    Args:
        context: side-level data for transforms (``request_index``).
        other: the other side's transformed tensor (used by ``qkv_part: {layout: auto}``'s
            correlation scan), or None.
    Returns:
        (tensor, notes) — notes record every transform applied and scan evidence.
    Raises:
        TilakeError: a ``.pt`` is missing, truncated or refused (the caller records MISSING).
        Unavailable: a transform cannot apply (e.g. padded without mask/cu_seqlens).
    """
    import torch

    notes: List[str] = []
    ts = [view.dump.load(s) for s in res.slots]
    for sl, t in zip(res.slots, ts):
        if sl.declared_dtype and sl.declared_dtype != str(t.dtype):
            notes.append(f"warning: dump.json says {sl.declared_dtype} for {sl.data_name}, the file holds {t.dtype} "
                         "(the file is used)")
    if res.combine == "sum":
        acc = getattr(torch, res.accumulate or "float32")
        t = ts[0].to(acc)
        for x in ts[1:]:
            t = t + x.to(acc)
        t = t.to(ts[0].dtype)
        notes.append(f"sum of {len(ts)} tensors in {res.accumulate or 'float32'}, rounded to {ts[0].dtype}")
    elif res.combine == "concat_last":
        t = torch.cat(ts, dim=-1)
        notes.append(f"concatenated {len(ts)} tensors on the last dim")
    else:
        t = ts[0]
    for tr in res.transforms:
        t = apply_transform(t, tr, dims, view, context if context is not None else {}, notes, other)
    return t, notes


def _qkv_split(t, layout: str, part: str, dims: Dict[str, int]):
    q, kv, hd = dims["q_size"], dims["kv_size"], dims["head_dim"]
    if t.shape[-1] != q + 2 * kv:
        raise Unavailable(f"fused qkv last dim {t.shape[-1]} != q_size+2*kv_size = {q + 2 * kv}")
    if layout == "concat":
        a, b = {"q": (0, q), "k": (q, q + kv), "v": (q + kv, q + 2 * kv)}[part]
        return t[..., a:b]
    groups = kv // hd
    qg = q // groups
    g = t.reshape(*t.shape[:-1], groups, qg + 2 * hd)
    a, b = {"q": (0, qg), "k": (qg, qg + hd), "v": (qg + hd, qg + 2 * hd)}[part]
    return g[..., a:b].reshape(*t.shape[:-1], (b - a) * groups)


def apply_transform(t, tr: Any, dims: Dict[str, int], view: Optional[SideView], context: dict,
                    notes: List[str], other=None):
    """Apply one transform (see the map format); appends a note describing it.

    Raises:
        Unavailable: the transform does not fit the tensor (wrong size-1 dim, missing dims,
            padded batch without a mask or cu_seqlens).
    """
    import torch

    from tilake.diagnosis.numerics import pearson

    if isinstance(tr, str):
        tr = {tr: None}
    (kind, arg), = tr.items()
    shape0 = list(t.shape)
    if kind == "squeeze":
        d = int(arg or 0)
        if t.dim() > d and t.shape[d] == 1:
            t = t.squeeze(d)
            notes.append(f"squeeze dim {d}: {shape0}→{list(t.shape)}")
        else:
            notes.append(f"squeeze dim {d} skipped: {shape0} has no size-1 dim {d}")
    elif kind == "unsqueeze":
        t = t.unsqueeze(int(arg or 0))
    elif kind == "slice_last":
        a, b = eval_expr(arg[0], dims), eval_expr(arg[1], dims)
        if b > t.shape[-1]:
            raise Unavailable(f"slice [{a}:{b}] beyond last dim {t.shape[-1]}")
        t = t[..., a:b]
        notes.append(f"slice last dim [{a}:{b}]")
    elif kind == "slice_first":
        a, b = eval_expr(arg[0], dims), eval_expr(arg[1], dims)
        if b > t.shape[0]:
            raise Unavailable(f"slice rows [{a}:{b}] beyond dim 0 size {t.shape[0]}")
        t = t[a:b]
        notes.append(f"slice dim 0 [{a}:{b}]")
    elif kind == "permute":
        t = t.permute(*[int(x) for x in arg])
        notes.append(f"permute {list(arg)}: {shape0}→{list(t.shape)}")
    elif kind == "flatten_from":
        d = int(arg)
        t = t.reshape(*t.shape[:d], -1)
        notes.append(f"flatten from dim {d}: {shape0}→{list(t.shape)}")
    elif kind == "reshape":
        t = t.reshape(*[eval_expr(x, dims) for x in arg])
        notes.append(f"reshape {shape0}→{list(t.shape)}")
    elif kind == "qkv_part":
        part, layout = arg["part"], arg.get("layout", "auto")
        for need in ("q_size", "kv_size", "head_dim"):
            if need not in dims:
                raise Unavailable(f"qkv slicing needs dim {need!r}, not derivable from this dump")
        if layout == "auto":
            if other is None:
                raise Unavailable("qkv layout 'auto' needs the other side's tensor for a correlation scan")
            scan = {}
            cands = {}
            for lay in ("concat", "per_group"):
                c = _qkv_split(t, lay, part, dims)
                cands[lay] = c
                o = other
                scan[lay] = pearson(c, o) if tuple(c.shape) == tuple(o.shape) else None
            same = torch.equal(cands["concat"], cands["per_group"])
            best = max(scan, key=lambda k: -2 if scan[k] is None else scan[k])
            if scan[best] is None:
                raise Unavailable(f"qkv layout scan: no candidate slice has the other side's shape {list(other.shape)}")
            ev = ", ".join(f"{k} r={v:.4f}" if v is not None else f"{k} r=n/a" for k, v in scan.items())
            notes.append(f"qkv layout scan ({part}): {ev} → {best}" + (" (layouts coincide)" if same else ""))
            context.setdefault("_scans", []).append({"part": part, "scores": scan, "chosen": best,
                                                     "layouts_coincide": same})
            t = cands[best]
        else:
            t = _qkv_split(t, layout, part, dims)
            notes.append(f"qkv part {part} ({layout} layout)")
    elif kind == "qkv_to_concat":
        # Megatron linear_qkv (per query group [q_g.., k_g, v_g]) → vLLM order [q; k; v]
        layout = (arg or {}).get("layout", "auto")
        for need in ("q_size", "kv_size", "head_dim"):
            if need not in dims:
                raise Unavailable(f"qkv regrouping needs dim {need!r}, not derivable from this dump")
        cands = {lay: torch.cat([_qkv_split(t, lay, p, dims) for p in ("q", "k", "v")], dim=-1)
                 for lay in ("concat", "per_group")}
        if layout == "auto":
            if other is None:
                raise Unavailable("qkv layout 'auto' needs the other side's tensor for a correlation scan")
            scan = {lay: (pearson(c, other) if tuple(c.shape) == tuple(other.shape) else None)
                    for lay, c in cands.items()}
            best = max(scan, key=lambda k: -2 if scan[k] is None else scan[k])
            if scan[best] is None:
                raise Unavailable(f"qkv layout scan: no candidate has the other side's shape {list(other.shape)}")
            same = torch.equal(cands["concat"], cands["per_group"])
            ev = ", ".join(f"{k} r={v:.4f}" if v is not None else f"{k} r=n/a" for k, v in scan.items())
            notes.append(f"qkv layout scan (whole qkv): {ev} → {best}" + (" (layouts coincide)" if same else ""))
            context.setdefault("_scans", []).append({"part": "qkv", "scores": scan, "chosen": best,
                                                     "layouts_coincide": same})
            layout = best
        t = cands[layout]
        notes.append(f"qkv regrouped from {layout} layout to [q; k; v]")
    elif kind == "gate_up_part":
        # fused gate/up: vLLM / Megatron concatenate [gate; up]; some fused kernels interleave rows
        part, layout = arg["part"], arg.get("layout", "auto")
        if "inter" not in dims:
            raise Unavailable("gate/up slicing needs dim 'inter', not derivable from this dump")
        i = dims["inter"]
        if t.shape[-1] != 2 * i:
            raise Unavailable(f"fused gate_up last dim {t.shape[-1]} != 2*inter = {2 * i}")
        k = 0 if part == "gate" else 1
        cands = {"concat": t[..., k * i:(k + 1) * i], "interleaved": t[..., k::2]}
        if layout == "auto":
            if other is None:
                raise Unavailable("gate_up layout 'auto' needs the other side's tensor for a correlation scan")
            scan = {lay: (pearson(c, other) if tuple(c.shape) == tuple(other.shape) else None)
                    for lay, c in cands.items()}
            best = max(scan, key=lambda x: -2 if scan[x] is None else scan[x])
            if scan[best] is None:
                raise Unavailable(f"gate_up layout scan: no candidate has the other side's shape {list(other.shape)}")
            ev = ", ".join(f"{x} r={v:.4f}" if v is not None else f"{x} r=n/a" for x, v in scan.items())
            notes.append(f"gate_up layout scan ({part}): {ev} → {best}")
            context.setdefault("_scans", []).append({"part": part, "scores": scan, "chosen": best,
                                                     "layouts_coincide": False})
            layout = best
        t = cands[layout]
        notes.append(f"gate_up part {part} ({layout} layout)")
    elif kind == "select_row":
        idx = context.get("request_index", arg if isinstance(arg, int) else None)
        if idx is None:
            raise Unavailable("select_row needs the request's row index (pairing.request_index)")
        t = t[int(idx)]
        notes.append(f"select request row {idx}: {shape0}→{list(t.shape)}")
    elif kind == "unpad":
        t = unpad(t, arg, view, dims, context, notes)
    else:
        raise Unavailable(f"unknown transform {kind!r} in boundary map")
    return t


def unpad(t, arg: dict, view: Optional[SideView], dims, context: dict, notes: List[str]):
    """Padded ``[B, S, ...]`` → packed ``[sum(len_b), ...]`` with an attention mask or cu_seqlens.

    The mask (``[B, S]``, nonzero = real token) gives exact positions; ``cu_seqlens`` gives
    lengths and assumes right padding (noted). Raises :class:`Unavailable` without either.
    """
    import torch

    lengths = None
    mask = None
    src = None
    if arg and "mask" in arg and view is not None:
        r = resolve(view, arg["mask"], view.dump.side)
        mask = view.dump.load(r.slots[0])
        src = "attention mask"
    elif arg and "cu_seqlens" in arg:
        cs = arg["cu_seqlens"]
        if isinstance(cs, dict) and view is not None:
            cs = view.dump.load(resolve(view, cs, view.dump.side).slots[0]).tolist()
        lengths = [int(b) - int(a) for a, b in zip(cs, cs[1:])]
        src = "cu_seqlens (right padding assumed)"
    elif context.get("cu_seqlens"):
        cs = context["cu_seqlens"]
        lengths = [int(b) - int(a) for a, b in zip(cs, cs[1:])]
        src = "cu_seqlens from the pairing (right padding assumed)"
    if mask is None and lengths is None:
        raise Unavailable("padded batch: no attention mask or cu_seqlens to remove padding; "
                          "refusing to compare padded tensors")
    if mask is not None:
        m = mask.reshape(mask.shape[0], -1).bool()
        if m.shape[0] != t.shape[0] or m.shape[1] != t.shape[1]:
            raise Unavailable(f"attention mask {list(mask.shape)} does not fit tensor {list(t.shape)}")
        out = t[m]
    else:
        if len(lengths) != t.shape[0] or max(lengths) > t.shape[1]:
            raise Unavailable(f"cu_seqlens lengths {lengths} do not fit padded tensor {list(t.shape)}")
        out = torch.cat([t[b, :n] for b, n in enumerate(lengths)], dim=0)
    notes.append(f"unpad with {src}: {list(t.shape)}→{list(out.shape)}")
    return out
