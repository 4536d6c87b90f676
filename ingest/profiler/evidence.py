"""The side-evidence rule, in one place: what a side of a run has to show (:class:`SideEvidence`).

The profiler ingest decides it per side (:func:`side_evidence`) from its captures' outcomes and
records it in ``runs.rl_config._evidence`` (``{"side_evidence": {side: evidence}, "side_reason":
{side: why}}``); the dbt model ``int_sides_evidenced`` reads that record and does not derive it again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tilake.vocab import CaptureStatus, Evidence

# capture statuses that give a side evidence (the rest: evidence_missing, unparsed)
USABLE = (CaptureStatus.OK, CaptureStatus.HOST_FALLBACK)


@dataclass(frozen=True)
class SideEvidence:
    """The evidence of one side of a run.

    Attributes:
        side: ``train`` | ``infer``.
        evidence: ``device`` (an ``ok`` capture with device kernels) | ``cpu_ops`` (only CPU-only torch
            traces are ``ok``: CPU ops stand for kernels) | ``host_fallback`` (only host-side
            ``api_statistic.csv`` figures) | ``evidence_missing``.
        reason: why evidence is missing (``"<first capture path>: <its reason>"`` or ``"no <side>
            capture was found"``); ``""`` when the side has evidence.
    """

    side: str
    evidence: str
    reason: str = ""

    @property
    def missing(self) -> bool:
        """True when the side has no usable capture."""
        return self.evidence == Evidence.MISSING


def side_evidence(side: str, captures: Sequence) -> SideEvidence:
    """Decide the evidence of ``side`` from the outcomes of all captures of the run.

    Args:
        side: ``train`` | ``infer``.
        captures: :class:`tilake.ingest.profiler.load.CaptureResult` of every side (``.capture.side``,
            ``.capture.path``, ``.status``, ``.evidence``, ``.reason``); those of ``side`` decide.
    Returns:
        :class:`SideEvidence`.
    """
    mine = [c for c in captures if c.capture.side == side]
    usable = [c for c in mine if c.status in USABLE]
    if usable:
        return SideEvidence(side, Evidence.DEVICE if any(c.status == CaptureStatus.OK and c.evidence != Evidence.CPU_OPS
                                                  for c in usable)
                            else Evidence.CPU_OPS if any(c.status == CaptureStatus.OK for c in usable)
                            else Evidence.HOST_FALLBACK)
    why = f"{mine[0].capture.path}: {mine[0].reason}" if mine else f"no {side} capture was found"
    return SideEvidence(side, Evidence.MISSING, why)
