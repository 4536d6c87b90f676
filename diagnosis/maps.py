"""Boundary maps as the diagnosis sees them: one import for the map reader, selectors and transforms.

Where each part lives:
  * :mod:`tilake.models.boundary_maps` — the one reader of ``models/*.yaml`` (load, validate, expand
    layers into :class:`Boundary` objects);
  * :mod:`tilake.diagnosis.selectors` — a map's names and dims resolved on one dump side;
  * :mod:`tilake.diagnosis.transforms` — loading and transforming the resolved tensors (fused q/k/v and
    gate/up slicing, layout scans, batch dims).
"""
from __future__ import annotations

from tilake.diagnosis.selectors import Resolved, SideView, Unavailable, eval_expr, resolve, resolve_dims  # noqa: F401
from tilake.diagnosis.transforms import _qkv_split, apply_transform, materialise, unpad  # noqa: F401
from tilake.models.boundary_maps import MODELS_DIR, SIDES, Boundary, expand, list_maps, load_map  # noqa: F401

__all__ = ["MODELS_DIR", "SIDES", "Boundary", "Resolved", "SideView", "Unavailable", "apply_transform",
           "eval_expr", "expand", "list_maps", "load_map", "materialise", "resolve", "resolve_dims", "unpad"]
