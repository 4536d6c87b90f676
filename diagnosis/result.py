"""The result of one dump-pair analysis (:class:`Analysis`) and the dumps of one round (:class:`RoundInput`)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional


@dataclass
class RoundInput:
    """The dumps of one round (round 0 = the original pair; round k = after stub k)."""

    train: Path
    infer: Path


@dataclass
class Analysis:
    """Everything one analysis found (serialised by :mod:`tilake.diagnosis.outputs`)."""

    map_name: str
    reference_side: str
    rounds: List[dict] = field(default_factory=list)
    boundary_rows: List[dict] = field(default_factory=list)
    weight_rows: List[dict] = field(default_factory=list)
    points: List[dict] = field(default_factory=list)
    hypotheses: List[dict] = field(default_factory=list)
    stub_instruction: Optional[dict] = None
    verdict: str = "not_run"
    consistency: str = "unknown"
    verdict_reason: str = ""
    notes: List[str] = field(default_factory=list)
    sides: Dict[str, dict] = field(default_factory=dict)
    dims: Dict[str, int] = field(default_factory=dict)
    layout_scans: List[dict] = field(default_factory=list)
    logprob: Dict[str, Any] = field(default_factory=dict)
    # token ids of both sides compared first (tilake.diagnosis.token_ids.compare_token_ids)
    token_ids: Dict[str, Any] = field(default_factory=dict)
    # the map's rounding bound in tensor-scale ULP (classification.rounding_max_tensor_ulp)
    rounding_bound: float = 4.0
    # fixes the dumps point to when no boundary could be compared (tilake.diagnosis.suggest)
    suggestions: List[dict] = field(default_factory=list)
    # what canonicalisation did to each side (tilake.diagnosis.canonical: TP merge, PP join, token selection)
    canonical: List[dict] = field(default_factory=list)
    # MoE routing of both sides (tilake.diagnosis.moe.router_flips): {} for a dense model
    moe: Dict[str, Any] = field(default_factory=dict)
    # optional boundaries of the map this model does not have (tilake.diagnosis.pair.applicable)
    not_applicable: List[dict] = field(default_factory=list)
    # named pitfalls of real runs, each with its evidence (tilake.diagnosis.pitfalls)
    pitfalls: List[dict] = field(default_factory=list)
    # msprobe L1 (API-level) dumps: the aligned API sequences and their statistics (tilake.diagnosis.api_sequence)
    api_sequence: Optional[Dict[str, Any]] = None
