"""The words tilake's rooms pass to each other: grades, evidence states, capture statuses, boundary
statuses, verdicts, phases and exit codes, each a ``str``-valued enum (exit codes: ``int``-valued).

The bottom floor beside :mod:`tilake.files` and :mod:`tilake.settings`: every room may import it, it
imports nothing of tilake. A member *is* its text: ``Grade.RED == "red"``, it hashes like ``"red"``
(a dict keyed by text finds it), ``str()``, ``format()``, ``repr()``, ``%s``, ``json.dumps``, csv,
DuckDB and Arrow all see ``"red"``. So lake columns keep their text values (no migration), and SQL
models, seeds and jinja templates keep writing the words as text.

Python 3.11 changed ``format()`` of a mixed-in ``str`` enum to the member's name (``Grade.RED``);
:class:`Word` pins ``__str__``/``__format__``/``__repr__`` to ``str``'s so every f-string and message
prints the same text on every Python this package supports (3.9+).

The grade *looks* (emoji, zh/en label, colour, severity rank) are data: :func:`grade_looks` reads them
from the grade seed ``dbt_project/seeds/grades.csv``, the same file dbt loads into the ``grades`` table.
"""
from __future__ import annotations

import csv
import functools
from enum import Enum, IntEnum
from pathlib import Path
from typing import Dict, NamedTuple

EVIDENCE_MISSING = "evidence_missing"
"""The one spelling of "no usable evidence" (a grade, a side's evidence, a capture status, a boundary
status, a verdict, a hypothesis status): say it with its reason rather than "no differences"."""

GRADES_CSV = Path(__file__).resolve().parent / "dbt_project" / "seeds" / "grades.csv"
"""The grade seed (package data): ``grade,emoji,label_zh,label_en,color,severity_rank``."""


class Word(str, Enum):
    """A vocabulary word: an enum member that is equal to, hashes like and prints as its text."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)

    __repr__ = str.__repr__


class Grade(Word):
    """Grade of a comparison row (``fct_op_comparison.grade``; rows of ``seeds/grades.csv``), most
    severe first; ``evidence_missing``: a side had no usable evidence, nothing was compared."""
    RED = "red"
    ORANGE = "orange"
    YELLOW = "yellow"
    GREEN = "green"
    EVIDENCE_MISSING = EVIDENCE_MISSING


class Evidence(Word):
    """What one side's counts are made of (``runs.<side>_evidence``, ``CaptureResult.evidence``):
    device kernels, innermost CPU ops of a CPU-only PyTorch trace, host-side API rows (no device
    rows in the capture), or nothing usable."""
    DEVICE = "device"
    CPU_OPS = "cpu_ops"
    HOST_FALLBACK = "host_fallback"
    MISSING = EVIDENCE_MISSING


class CaptureStatus(Word):
    """Status of one ingested capture (``captures.status``) and of a whole run (``ProfileResult.status``):
    usable device rows, host-side rows only, or no usable evidence (the reason says why)."""
    OK = "ok"
    HOST_FALLBACK = "host_fallback"
    EVIDENCE_MISSING = EVIDENCE_MISSING


class BoundaryStatus(Word):
    """Status of one boundary row of the dump analysis (``boundary_results.csv`` column ``status``).

    ``EXACT``/``NOT_EXACT``/``NONFINITE``: compared by value (bitwise equal, different, a NaN/Inf on one
    side); ``SHAPE_DIFF``/``DTYPE_DIFF``: shapes or dtypes differ after mapping; ``MISSING``: the
    boundary has no dump on a side; ``evidence_missing``: the dumps are there but could not be compared
    (the reason says why); ``ISOLATED``: stubbed in a later round; ``not_compared``: not analysed."""
    EXACT = "EXACT"
    NOT_EXACT = "NOT_EXACT"
    NONFINITE = "NONFINITE"
    SHAPE_DIFF = "SHAPE_DIFF"
    DTYPE_DIFF = "DTYPE_DIFF"
    MISSING = "MISSING"
    EVIDENCE_MISSING = EVIDENCE_MISSING
    ISOLATED = "ISOLATED"
    NOT_COMPARED = "not_compared"


NOT_COMPARED = (BoundaryStatus.EVIDENCE_MISSING, BoundaryStatus.MISSING)
"""Boundary statuses that mean "no values were compared here"."""
SKIPPED = (BoundaryStatus.ISOLATED, BoundaryStatus.NOT_COMPARED)
"""Boundary statuses of a row left out of a round: stubbed (isolated) or not analysed."""


class HypothesisStatus(Word):
    """Status of one hypothesis of the dump analysis (``hypotheses.json``)."""
    CONFIRMED = "confirmed"
    EXCLUDED = "excluded"
    EVIDENCE_MISSING = EVIDENCE_MISSING


class AlignStatus(Word):
    """Status of the layer-by-layer kernel alignment of a step (``kernel_layers.status``): ``partial``:
    the layer counts differ and the common prefix is aligned."""
    OK = "ok"
    PARTIAL = "partial"
    EVIDENCE_MISSING = EVIDENCE_MISSING


class RoundOutcome(Word):
    """How one round of the dump analysis ended (``rounds[].outcome`` of ``report_source.json``);
    ``pending``: a round the stub instruction asks for, not analysed yet."""
    ALL_EXACT = "all_exact"
    DOWNSTREAM_ALL_EXACT = "downstream_all_exact"
    TOKEN_IDS_DIFFER = "token_ids_differ"
    PRECISION_CONFIG = "precision_config"
    EVIDENCE_MISSING = EVIDENCE_MISSING
    STUB_NEEDED = "stub_needed"
    STUB_NOT_EFFECTIVE = "stub_not_effective"
    ONLY_ROUNDING_LEVEL = "only_rounding_level"
    PENDING = "pending"


class RoundsStop(Word):
    """Why ``tilake scan --dump`` stopped collecting stub rounds (``tilake_dump_rounds.json`` ``stop``)."""
    NO_STUB_NEEDED = "no_stub_needed"
    NOT_ISOLABLE = "not_isolable"
    STUB_NOT_EFFECTIVE = "stub_not_effective"
    MAX_ROUNDS = "max_rounds"


class LoggedVsDump(Word):
    """The RL framework's logged train–rollout mismatch of the dumped step against the dump's verdict."""
    CONSISTENT = "consistent"
    CONTRADICTION = "contradiction"
    EVIDENCE_MISSING = EVIDENCE_MISSING


class Verdict(Word):
    """The dump analysis' verdict (``report_source.json`` ``verdict``)."""
    EXACT = "exact"
    NONZERO = "nonzero"
    EVIDENCE_MISSING = EVIDENCE_MISSING
    NOT_RUN = "not_run"


class GateOutcome(Word):
    """Outcome of ``tilake dumps gate`` (``dump_gates.outcome``): every mapped boundary bitwise equal or
    within its ULP budget; a boundary differs beyond it; or no value difference but some mapped
    boundary could not be compared (never a pass on missing evidence)."""
    PASS = "pass"
    FAIL = "fail"
    EVIDENCE_MISSING = EVIDENCE_MISSING


class GateCheck(Word):
    """How one boundary fared in the gate (``dump_gates.failures[].check``): bitwise equal, within its
    ULP budget, beyond it (or not bitwise comparable), not compared, or not mapped by the map (a side
    the map deliberately leaves out, with the map's reason)."""
    EQUAL = "equal"
    WITHIN_BUDGET = "within_budget"
    FAIL = "fail"
    NOT_COMPARED = "not_compared"
    NOT_MAPPED = "not_mapped"


class Consistency(Word):
    """What the verdict says about train vs inference (``report_source.json`` ``consistency``)."""
    BITWISE = "bitwise"
    ROUNDING_ONLY = "rounding_only"
    ROUNDING_BIASED = "rounding_biased"
    LOGIC_LEVEL = "logic_level"
    PRECISION_CONFIG = "precision_config"
    INPUTS_DIFFER = "inputs_differ"
    UNKNOWN = "unknown"


class Phase(Word):
    """RL step phase of a kernel (``seeds/phase_rules.csv`` column ``phase``); ``all``: no phase filter."""
    ACTOR_LOG_PROB = "actor_log_prob"
    REF_LOG_PROB = "ref_log_prob"
    UPDATE_ACTOR = "update_actor"
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"
    ALL = "all"


TRAIN_PHASES = (Phase.ACTOR_LOG_PROB, Phase.REF_LOG_PROB, Phase.UPDATE_ACTOR)
INFER_PHASES = (Phase.PREFILL, Phase.DECODE, Phase.MIXED)


class Pass(Word):
    """Pass of a training kernel within its phase (``seeds/phase_rules.csv`` column ``pass``)."""
    FWD = "fwd"
    BWD = "bwd"
    OPTIMIZER = "optimizer"


class ExitCode(IntEnum):
    """Exit status of the ``tilake`` commands (the CLI's epilog says the same)."""
    DONE = 0
    """Done; findings are in the outputs, not the status."""
    SCAN_SKIPPED = 1
    """``tilake scan`` ran the job but skipped the comparison (the report says why)."""
    CHECK_FAILED = 1
    """A CI check failed: ``tilake dumps gate`` (a mapped boundary differs or was not compared),
    ``tilake trend --fail-if`` (a series regressed) or ``tilake check`` (the lake has a problem). The same status as :attr:`SCAN_SKIPPED` (an alias)."""
    BAD_INPUT = 2
    """Bad input or a stopped step: one ``error:`` line on stderr."""
    EVIDENCE_MISSING = 3
    """Outputs written, but nothing could be compared (a side or every boundary is evidence_missing)."""

    def __str__(self) -> str:
        return int.__repr__(self)

    def __format__(self, spec: str) -> str:
        return int.__format__(int(self), spec)


class GradeLook(NamedTuple):
    """One row of ``seeds/grades.csv``: how a grade is shown."""
    grade: str
    emoji: str
    label_zh: str
    label_en: str
    color: str          # colour name of the report's grade markup (``<span style="color:…">``)
    severity_rank: int  # 1 = most severe; evidence_missing is 0

    def label(self, lang: str = "zh") -> str:
        """The grade's word in ``lang`` (``zh`` or ``en``): ``高差异`` / ``high``."""
        return self.label_zh if lang == "zh" else self.label_en


@functools.lru_cache(maxsize=None)
def grade_looks() -> Dict[str, GradeLook]:
    """The shipped grade seed as ``{grade: GradeLook}``, in the file's (severity) order.

    Source: ``dbt_project/seeds/grades.csv`` (package data), the file dbt loads as ``grades``.
    Raises:
        OSError, KeyError, ValueError: the package's seed is missing or malformed (an install fault,
        not user input).
    """
    with GRADES_CSV.open(encoding="utf-8", newline="") as f:
        return {r["grade"]: GradeLook(r["grade"], r["emoji"], r["label_zh"], r["label_en"], r["color"],
                                      int(r["severity_rank"])) for r in csv.DictReader(f)}


def grade_look(grade: str) -> GradeLook:
    """The look of ``grade``; an unknown grade looks like ``evidence_missing`` (nothing claimed)."""
    looks = grade_looks()
    return looks.get(grade) or looks[Grade.EVIDENCE_MISSING]
