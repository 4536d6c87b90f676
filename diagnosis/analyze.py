"""Per-boundary comparison of two msprobe dumps: exact gate, ULP, classification, first divergence,
amplification chain, hypothesis exclusion and stub rounds.

Entry point: :func:`analyze_pair` (round 0 plus any stub rounds) → :class:`Analysis`. This module is
the facade; each concern lives in a file named after it:

  * :mod:`~tilake.diagnosis.pair` — two dump sides through one map; one boundary compared;
  * :mod:`~tilake.diagnosis.divergence` — classification, first divergence, amplification, points;
  * :mod:`~tilake.diagnosis.hypotheses` — hypothesis exclusion;
  * :mod:`~tilake.diagnosis.stubs` — stub instructions, stub sources, stub verification;
  * :mod:`~tilake.diagnosis.rounds` and :mod:`~tilake.diagnosis.verdict` — the round driver, the verdict.

Vocabulary (shared/ARCHITECTURE.md): status EXACT / NOT_EXACT / SHAPE_DIFF / DTYPE_DIFF /
NONFINITE / MISSING / evidence_missing; class rounding-level / logic-level; first divergence;
amplification chain; independent difference point; round (stub iteration).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from tilake.diagnosis.divergence import NOT_COMPARED, amplification_chain, classify, find_points, first_divergence  # noqa: F401
from tilake.diagnosis.hypotheses import hypotheses, kernel_fingerprint  # noqa: F401
from tilake.diagnosis.numerics import torch_threads
from tilake.diagnosis.pair import Pair, compare_boundary, compare_weights  # noqa: F401
from tilake.diagnosis.result import Analysis, RoundInput
from tilake.diagnosis.rounds import frozen_heap, run_rounds
from tilake.diagnosis.stubs import prepare_stub_source, stub_instruction, verify_stub  # noqa: F401
from tilake.lake.dump_records import MeasuredLogprob, Pairing, TaskCard
from tilake.models.boundary_maps import BoundaryMap

__all__ = ["NOT_COMPARED", "Analysis", "Pair", "RoundInput", "amplification_chain", "analyze_pair", "classify",
           "compare_boundary", "compare_weights", "find_points", "first_divergence", "hypotheses",
           "kernel_fingerprint", "prepare_stub_source", "stub_instruction", "verify_stub"]


def analyze_pair(rounds: Sequence[RoundInput], bmap: BoundaryMap, pairing: Optional[Pairing] = None,
                 task_card: Optional[TaskCard] = None, progress: Optional[Callable[[str, int, int], None]] = None,
                 logprob: Optional[MeasuredLogprob] = None) -> Analysis:
    """Analyse round 0 and every stub round given.

    Args:
        rounds: round 0 dumps, then the dumps collected after each stub instruction.
        bmap: boundary map (:func:`tilake.models.boundary_maps.load_map`). pairing: request row /
            tokens / cu_seqlens. task_card: for the parallel layout hypothesis.
        progress: ``callback(label, done, total)``.
        logprob: measured prefill log-prob diff ``{"mean":..,"max":..,"std":..,"source":..}`` or None.
    Returns:
        :class:`Analysis`.
    Raises:
        TilakeError: unreadable dumps (see :class:`~tilake.diagnosis.pair.Pair`).
    """
    with torch_threads(), frozen_heap():
        return run_rounds(rounds, bmap, pairing, task_card, progress, logprob)
