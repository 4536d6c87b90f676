"""Records of the bitwise acceptance gate (``tilake dumps gate``) that cross rooms.

:mod:`tilake.diagnosis.gate` makes them from an analysis, :mod:`tilake.pipeline.gate` writes them to
the lake (table ``dump_gates``, :mod:`tilake.lake.schema`) and the command line and the MCP server print
them. They live in ``lake``, the lowest room all of those may import (like :mod:`tilake.lake.dump_records`).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from tilake.lake.schema import LakeRow
from tilake.vocab import ExitCode, GateCheck, GateOutcome


@dataclass(frozen=True)
class BudgetEntry:
    """One line of a ULP budget file: a boundary name or glob and its limits (None: no limit of that kind).

    ``max_elem_ulp``: the largest per-element ULP distance allowed (``boundary_results.max_elem_ulp``,
    native dtype); ``tensor_ulp``: the largest max|Δ| in ULP of max|reference| (``tensor_ulp``).
    """

    pattern: str
    max_elem_ulp: Optional[float] = None
    tensor_ulp: Optional[float] = None

    def text(self) -> str:
        """``L*.attn_core.out ≤ 1 ULP`` (element) / ``… tensor-scale ≤ 2 ULP``, for the gate's line."""
        parts = []
        if self.max_elem_ulp is not None:
            parts.append(f"≤ {_num(self.max_elem_ulp)} ULP per element")
        if self.tensor_ulp is not None:
            parts.append(f"≤ {_num(self.tensor_ulp)} ULP at tensor scale")
        return f"{self.pattern}: " + ", ".join(parts)


@dataclass(frozen=True)
class Budget:
    """A per-boundary ULP budget (``--budget FILE``); no entries: every boundary must be bitwise equal.

    An exact boundary name wins over globs; among globs the first in file order wins
    (:func:`tilake.diagnosis.gate.budget_for`).
    """

    entries: Tuple[BudgetEntry, ...] = ()
    # the file read, and the sha256 of its bytes (recorded with the gate)
    path: Optional[str] = None
    sha256: Optional[str] = None


@dataclass(frozen=True)
class GateBoundary:
    """One boundary's decision in the gate."""

    boundary: str
    # activation | weight
    kind: str
    # the analysis' boundary status (EXACT, NOT_EXACT, SHAPE_DIFF, MISSING, …)
    status: str
    # equal | within_budget | fail | not_compared | not_mapped (tilake.vocab.GateCheck)
    check: str
    # one sentence: why this check (figures, budget, the analysis' reason)
    reason: str
    # per-element and tensor-scale ULP of a compared NOT_EXACT boundary (None otherwise or unknown)
    max_elem_ulp: Optional[float] = None
    tensor_ulp: Optional[float] = None
    # the budget entry applied (its pattern), None: no budget for this boundary
    budget: Optional[str] = None


@dataclass
class GateResult:
    """The outcome of one gate (:func:`tilake.diagnosis.gate.evaluate`).

    ``line`` is the one line the command prints: ``PASS …`` or ``FAIL <first failing boundary>: …``.
    Counts: ``mapped`` boundaries (a selector on both sides) = ``exact`` + ``within_budget`` + ``failing`` +
    ``not_compared``; ``not_mapped`` ones (the map leaves a side out on purpose) are counted apart and never
    make a gate pass or fail.
    """

    # pass | fail | evidence_missing (tilake.vocab.GateOutcome)
    outcome: str
    line: str
    map_name: str
    train_path: Optional[str]
    infer_path: Optional[str]
    mapped: int = 0
    exact: int = 0
    within_budget: int = 0
    failing: int = 0
    not_compared: int = 0   # lake column uncompared
    not_mapped: int = 0
    # the first boundary that is not equal / within budget, in the map's order (activations, then weights)
    first_failing: Optional[GateBoundary] = None
    # every boundary's decision, in the map's order
    boundaries: List[GateBoundary] = field(default_factory=list)
    budget: Budget = field(default_factory=Budget)
    # the token-id comparison the analysis made first (text), and budget entries that matched no boundary
    token_ids: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    # written by the pipeline: output name → path, rows per lake table, dbt nodes built
    outputs: Dict[str, str] = field(default_factory=dict)
    lake_rows: Dict[str, int] = field(default_factory=dict)
    dbt_nodes: Optional[int] = None

    @property
    def passed(self) -> bool:
        """True only for outcome ``pass``."""
        return self.outcome == GateOutcome.PASS

    @property
    def exit_code(self) -> int:
        """0 when the gate passed, else 1 (a CI job fails on it)."""
        return int(ExitCode.DONE if self.passed else ExitCode.CHECK_FAILED)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready values, keys in field order, plus ``passed`` and ``exit_code``."""
        out = dataclasses.asdict(self)
        out["budget"]["entries"] = [dataclasses.asdict(e) for e in self.budget.entries]
        out.update(passed=self.passed, exit_code=self.exit_code)
        return out

    def lake_row(self) -> LakeRow:
        """The ``dump_gates`` row of this gate (columns of :data:`tilake.lake.schema.TABLES`)."""
        bad = [b for b in self.boundaries if b.check in (GateCheck.FAIL, GateCheck.NOT_COMPARED)]
        ulps = [b.max_elem_ulp for b in self.boundaries if b.max_elem_ulp is not None]
        ff = self.first_failing
        return {
            "outcome": self.outcome, "passed": self.passed, "line": self.line, "map_name": self.map_name,
            "train_path": self.train_path, "infer_path": self.infer_path,
            "budget_path": self.budget.path, "budget_sha256": self.budget.sha256,
            "budget": json.dumps([dataclasses.asdict(e) for e in self.budget.entries]) if self.budget.entries else None,
            "mapped": self.mapped, "exact": self.exact, "within_budget": self.within_budget,
            "failing": self.failing, "uncompared": self.not_compared, "not_mapped": self.not_mapped,
            "first_failing_boundary": ff.boundary if ff else None, "first_failing_status": ff.status if ff else None,
            "first_failing_max_elem_ulp": ff.max_elem_ulp if ff else None,
            "max_elem_ulp": max(ulps) if ulps else None,
            "failures": json.dumps([dataclasses.asdict(b) for b in bad], ensure_ascii=False) if bad else None,
            "gated_at": _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None),
        }


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"
