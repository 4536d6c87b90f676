"""Records of a dump analysis that cross rooms: what ``tilake dumps analyze`` hands its printer and ``--json``.

They live in ``lake`` because it is the lowest room both sides may import: ``pipeline`` produces them
(from :class:`tilake.diagnosis.result.Analysis`) and ``reports`` prints them, and ``reports`` never imports
``diagnosis`` or ``pipeline`` (import-linter contracts in ``pyproject.toml``). Serialised by
:meth:`DumpSummary.to_dict`, key for key as the dict it replaces (``--json`` output unchanged).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional


class DumpPoint(NamedTuple):
    """One independent difference point (a tuple: JSON writes it as ``[round, boundary, class]``)."""

    # stub round the point was found in (0 = the original pair)
    round: int
    # boundary name of the map (``L0.attn_core.out``)
    boundary: str
    # rounding-level | logic-level; None when no tensor was dumped (md5/statistics only)
    cls: Optional[str]


@dataclass(frozen=True)
class DumpSummary:
    """The outcome of one ``tilake dumps analyze`` (:func:`tilake.pipeline.dumps.run_analyze`)."""

    # consistent | inconsistent | … (tilake.diagnosis.verdict)
    verdict: str
    # consistency word of the verdict
    consistency: str
    # why, in one line
    reason: str
    # the first diverging boundary of round 0, else why none was found (None without rounds)
    first_divergence: Optional[str]
    # independent difference points, every round
    points: List[DumpPoint] = field(default_factory=list)
    # stub_instruction.json asks for another round
    stub_needed: bool = False
    # output name → path (task_card, boundary_results, report_source, alignment_report_{md,html} …)
    outputs: Dict[str, str] = field(default_factory=dict)
    # rows written per lake table ({} without --run-id)
    lake_rows: Dict[str, int] = field(default_factory=dict)
    # dbt nodes built (None without --build)
    dbt_nodes: Optional[int] = None
    # fixes the dumps point to when no boundary could be compared
    suggestions: List[str] = field(default_factory=list)
    # dump-level warnings (fewer tensors on disk than dump.json declares)
    warnings: List[str] = field(default_factory=list)
    # the process exit status the verdict asks for (tilake.diagnosis.verdict.exit_status)
    exit_code: int = 0

    def to_dict(self) -> Dict[str, Any]:
        """The summary as JSON-ready values, keys in field order (``points`` as ``[round, boundary, class]``)."""
        out = dataclasses.asdict(self)
        out["points"] = [tuple(p) for p in self.points]
        return out
