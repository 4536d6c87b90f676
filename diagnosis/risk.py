"""Risk rating of an independent difference point: critical / high / medium / low, with the rule that
produced it (rules are data: :data:`RULES`, first match wins)."""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple


def _logic(p: dict) -> bool:
    return p.get("class") == "logic-level"


def _at_attention_or_logits(p: dict) -> bool:
    name = str(p.get("boundary") or "")
    return p.get("op") == "attention" or name == "logits" or name.endswith(".logits")


# (risk, rule id, why, predicate) — checked in order
RULES: List[Tuple[str, str, str, Callable[[dict], bool]]] = [
    ("medium", "unmeasured_difference", "differs (md5) but the size and class are unknown without the tensor",
     lambda p: p.get("class") is None),
    ("critical", "logic_at_attention_or_logits",
     "logic-level difference at attention or logits: changes what is attended to / sampled",
     lambda p: _logic(p) and _at_attention_or_logits(p)),
    ("high", "logic_level", "logic-level difference: beyond any kernel rounding", _logic),
    ("medium", "precision_downgrade", "precision downgrade: one side stores the other rounded to a narrower dtype",
     lambda p: bool(p.get("precision_downgrade"))),
    ("high", "biased_rounding", "biased rounding: a one-direction lean accumulates with depth",
     lambda p: bool(p.get("systematic_bias"))),
    ("medium", "unbiased_rounding_at_norm", "unbiased independent rounding at a norm: accumulates over layers",
     lambda p: p.get("op") == "norm"),
    ("low", "unbiased_rounding", "unbiased independent rounding: the expected difference of two kernels",
     lambda p: True),
]


def rate(point: dict) -> Dict[str, str]:
    """``{"risk", "risk_rule", "risk_reason"}`` of one point (keys of :func:`find_points` output)."""
    for risk, rule, why, pred in RULES:
        if pred(point):
            return {"risk": risk, "risk_rule": rule, "risk_reason": why}
    raise AssertionError("the last rule matches every point")  # pragma: no cover
