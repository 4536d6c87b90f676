"""The one reader of the per-family boundary maps (``models/*.yaml``): load, validate, expand layers.

A map is data (the format is documented in the header of ``models/qwen3_hf_vllm.yaml``): for each
boundary — a tensor that is mathematically the same on both sides — a selector per side, the
boundaries feeding it (``inputs``), an op kind and an optional stub target. This module knows the
YAML and nothing about dumps; :mod:`tilake.diagnosis.selectors` resolves a :class:`Boundary` on a dump
and :mod:`tilake.diagnosis.transforms` produces the comparable tensor.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, TypedDict, cast

import yaml

from tilake.errors import TilakeError

MODELS_DIR = Path(__file__).resolve().parent
SIDES = ("train", "infer")

# a boundary map as load_map returns it: the YAML's top-level keys (models/qwen3_hf_vllm.yaml documents
# each) plus ``_path``, the file read; ``boundaries`` / ``weights`` items stay as the YAML states them
BoundaryMap = TypedDict("BoundaryMap", {
    "family": str, "pair": str, "reference_side": str, "sides": Dict[str, Any], "dims": Dict[str, Any],
    "layers": Any, "layer_input": Dict[str, str], "layer_frames": Any, "default": Any,
    "classification": Dict[str, Any], "boundaries": List[Dict[str, Any]], "weights": List[Dict[str, Any]],
    "_path": str,
}, total=False)


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


def load_map(name_or_path: str) -> BoundaryMap:
    """Load a boundary map by file path or by name (``qwen3_hf_vllm``) from ``models/``.

    Returns:
        the map as a dict, with ``_path`` (the file read) added.
    Raises:
        TilakeError: file missing, invalid YAML, missing ``boundaries``, an item without a name or
            without a selector (or explicit ``null``) for each side.
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
        raise TilakeError(f"boundary map is not valid YAML: {str(exc).splitlines()[0]}", path=p) from exc
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
                if sel is not None and not (isinstance(sel, dict) and ({"module", "api", "sum", "concat_last", "any"}
                                                                        & set(sel))):
                    raise TilakeError(f"{key}[{i}] ({b['name']}) {side} selector needs module, api, sum, "
                                      "concat_last or any", path=p)
    data["_path"] = str(p)
    return cast(BoundaryMap, data)


def _subst(obj: Any, mapping: Dict[str, str]) -> Any:
    """Replace ``{key}`` placeholders in every string of a nested list/dict."""
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
        boundaries whose tensors feed this one), position (0-based, the map's order),
        spec {side: selector or None}, stub {side: stub spec, or a list of them when the tensor
        reaches several modules}, layer (int or None), reason_missing (text when a side is
        deliberately absent), stub_none (the map's reason why no module can be stubbed for it).
    """

    name: str
    op: str
    inputs: List[str]
    position: int
    spec: Dict[str, Optional[Dict[str, Any]]]
    stub: Dict[str, Any] = field(default_factory=dict)
    layer: Optional[int] = None
    reason_missing: Optional[str] = None
    stub_none: Optional[str] = None
    optional: bool = False
    via_op: Optional[Dict[str, Any]] = None


def expand(bmap: BoundaryMap, n_layers: int, key: str = "boundaries") -> List[Boundary]:
    """Expand a map's boundary (or ``weights``) list for ``n_layers`` layers, in the map's order.

    Per-layer items are grouped: all per-layer items of layer 0, then layer 1, …; ``{i}`` is the
    layer, ``{p}`` the previous layer, ``{n}`` the next layer, ``{last}`` the last layer,
    ``{layer_input}`` the map's ``layer_input`` boundary of that layer. On the last layer a per-layer
    item's ``stub_last`` (when given) replaces its ``stub``: the tensor a layer hands to the next
    layer goes to the final norm after the last one; its ``last: {side: selector}`` replaces that side's
    selector the same way.
    """
    li: Dict[str, str] = bmap.get("layer_input") or {}
    out: List[Boundary] = []
    items: List[Dict[str, Any]] = cast(List[Dict[str, Any]], bmap.get(key) or [])
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
                if layer == n_layers - 1 and "stub_last" in it:
                    it = {**it, "stub": it["stub_last"]}
                if layer == n_layers - 1 and isinstance(it.get("last"), dict):
                    it = {**it, **it["last"]}   # a side's selector on the last layer (e.g. the final norm's output.1)
                out.append(_mk(it, {"i": str(layer), "p": str(layer - 1), "n": str(layer + 1),
                                    "last": str(n_layers - 1)}, layer, li, len(out)))
        i = j
    return out


def _mk(item: Dict[str, Any], mapping: Dict[str, str], layer: Optional[int], li: Dict[str, str],
        pos: int) -> Boundary:
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
        reason_missing=item.get("reason_missing"), stub_none=item.get("stub_none"),
        optional=bool(item.get("optional")), via_op=_subst(item.get("via_op"), mapping))
