"""Records of a dump analysis that cross rooms: what ``tilake dumps analyze`` hands its printer and ``--json``.

They live in ``lake`` because it is the lowest room both sides may import: ``pipeline`` produces them
(from :class:`tilake.diagnosis.result.Analysis`) and ``reports`` prints them, and ``reports`` never imports
``diagnosis`` or ``pipeline`` (import-linter contracts in ``pyproject.toml``). Serialised by
:meth:`DumpSummary.to_dict`, key for key as the dict it replaces (``--json`` output unchanged).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, TypedDict, Union


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
    # the profile ⋈ dump join of the dump report ({"status", "reason"}; None: not in a lake)
    profile_join: Optional[Dict[str, Optional[str]]] = None
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


# ------------------------------------------------------------------ the JSON documents of a dump analysis
# TypedDicts: the analysis builds and writes them as plain dicts (task_card.json, report_source.json are
# written key for key from them), and the reports read them back from the file; the schema of
# report_source.json (reports/templates/report_source.schema.json) states the same keys.

class Pairing(TypedDict, total=False):
    """How the request's rows are chosen on each side (``dumps analyze`` options; all optional)."""

    # --request-index: the request in a padded batch
    request_index: int
    # --request-tokens START:END: rows of the request in a token-major batch
    request_tokens: List[int]
    # --cu-seqlens: packed-sequence boundaries
    cu_seqlens: List[int]


class MeasuredLogprob(TypedDict):
    """A measured prefill log-prob diff (``--logprob-json``, tilake.diagnosis.logprob.check_logprob)."""

    mean: float
    max: float
    std: Optional[float]
    # where the figures come from (user text; ``user-supplied`` by default)
    source: str


class TaskCard(TypedDict, total=False):
    """``task_card.json``: the scope of one analysis; anything not known is the text ``unknown``.

    Built by :func:`tilake.diagnosis.outputs.task_card` (every key), then ``canonical`` and ``observed``
    added by the pipeline; a caller of the lower functions may pass a partial card.
    """

    # side → {path, step, rank, msprobe_task, msprobe_level, framework}
    dumps: Dict[str, Dict[str, Any]]
    model: str
    train_backend: str
    train_backend_version: str
    infer_backend: str
    infer_backend_version: str
    hardware: str
    request_id: str
    prompt_length: str
    goal: str
    # {step, rank, request} pairing as the user states it
    pairing: Dict[str, str]
    # side → {tp, pp, ep}, or unknown
    parallel: Dict[str, Union[Dict[str, str], str]]
    known_traps: str
    # what canonicalisation did to each side (TP merge, PP join, token selection)
    canonical: List[Dict[str, Any]]
    # token rows / layers seen per side and where they were read
    observed: Dict[str, Any]
    # how the dumps were collected (tilake scan --dump): rounds and why they stopped
    collection: "Collection"


class CollectionRound(TypedDict):
    """One collection run of ``tilake scan --dump`` as the task card records it."""

    round: int
    dir: str
    # the side msprobe ``load`` overrode (None in round 0) and the boundary it isolates
    target_side: Optional[str]
    isolates: Optional[str]
    # the stubbed inputs bitwise equal to their source (None in round 0)
    verified: Optional[bool]
    outcome: Optional[str]
    wall_s: float
    note: str


class Collection(TypedDict):
    """``task_card.collection``: how ``tilake scan --dump`` collected the rounds (also in ``dump_runs.task_card``)."""

    method: str
    rounds_collected: int
    max_rounds: int
    # tilake.vocab.RoundsStop and one line
    stop: str
    stop_reason: str
    rounds: List[CollectionRound]
    # verl's logged mismatch of the dumped step: metric → value (None: NaN), and "source"
    logged_mismatch: Dict[str, Union[float, str, None]]


# one activation boundary of one round as report_source.json lists it (every key present; None when not
# measured). "class" is a Python keyword, hence the functional form.
BoundaryRow = TypedDict("BoundaryRow", {
    "round": int, "boundary": str, "position": int, "op": Optional[str], "status": str, "reason": Optional[str],
    "train_shape": Optional[List[int]], "infer_shape": Optional[List[int]], "train_dtype": Optional[str],
    "mismatch_count": Optional[int], "mismatch_fraction": Optional[float], "max_abs_diff": Optional[float],
    "tensor_ulp": Optional[float], "max_elem_ulp_significant": Optional[float], "signed_mean_ulp": Optional[float],
    "pos_count": Optional[int], "neg_count": Optional[int], "ulp_hist": Optional[Dict[str, int]],
    "rows_differing": Optional[int], "rows_total": Optional[int], "pattern": Optional[str], "class": Optional[str],
    "role": Optional[str], "class_evidence": Optional[List[str]], "inputs_equal": Optional[bool],
    "systematic_bias": Optional[bool], "train_source": Optional[str], "infer_source": Optional[str],
    "train_transforms": Optional[List[Any]], "infer_transforms": Optional[List[Any]],
    "mag_signed_mean_ulp": Optional[float], "share_smaller_magnitude": Optional[float],
    "signed_count": Optional[int], "signed_filter": Optional[str], "bias": Optional[Any],
    "cols_differing": Optional[int], "cols_total": Optional[int], "logic_rows": Optional[List[int]],
    "logic_rows_count": Optional[int], "logic_cols": Optional[List[int]], "logic_cols_count": Optional[int],
    "row_tensor_ulp": Optional[List[float]], "cosine": Optional[float], "risk": Optional[str],
    "downcast": Optional[Any], "precision_downgrade": Optional[bool], "constant_rows": Optional[Any],
    "quant_error": Optional[Dict[str, Any]], "equality_rate": Optional[float],
})

# one link of an amplification chain: a boundary after the first divergence and its growth
ChainLink = TypedDict("ChainLink", {"boundary": str, "position": int, "status": str, "max_abs_diff": Optional[float],
                                    "tensor_ulp": Optional[float], "growth_vs_first": Optional[float]})

# one independent difference point (report_source.json "points"; rounds[].points)
PointRow = TypedDict("PointRow", {
    "round": int, "boundary": str, "position": int, "train_source": Optional[str], "infer_source": Optional[str],
    "class": Optional[str], "evidence": List[str], "status": str, "max_abs_diff": Optional[float],
    "tensor_ulp": Optional[float], "pattern": Optional[str], "systematic_bias": Optional[bool], "bias": Optional[Any],
    "logic_rows": List[int], "logic_cols": List[int], "cosine": Optional[float], "op": Optional[str],
    "precision_downgrade": Optional[bool], "constant_rows": Optional[Any], "chain": List[ChainLink],
    "risk": Optional[str], "risk_rule": Optional[str], "risk_reason": Optional[str],
    "quant_error": Optional[Dict[str, Any]],
}, total=False)


class Hypothesis(TypedDict):
    """One cause the analysis checked (weights not in sync, a dtype downcast …) and what it found."""

    hypothesis: str
    # supported | refuted | evidence_missing | … (tilake.diagnosis.hypotheses)
    status: str
    evidence: List[str]


class RoundRecord(TypedDict, total=False):
    """One round of the analysis (0 = the original pair; k = after stub k), amplification chain left out."""

    round: int
    # the dump folders of the round
    train: str
    infer: str
    # status of the first divergence search (boundary, status, first_non_exact, uncompared_predecessors, reason)
    first_divergence: Dict[str, Any]
    points: List[PointRow]
    suspects: List[Any]
    # status → boundaries
    counts: Dict[str, int]
    # stub_needed | done | stub_not_effective | …
    outcome: str
    # rounds after a stub: did the stub take effect, which boundaries were isolated
    stub_verification: Dict[str, Any]
    isolated: List[str]


class ReportSource(TypedDict):
    """``report_source.json`` (schema ``tilake.report_source/1``): the facts the dump reports are rendered
    from. Built by :func:`tilake.diagnosis.outputs.report_source`; validated against
    ``reports/templates/report_source.schema.json`` in the tests."""

    schema: str
    generated_at: str
    task_card: TaskCard
    # {name, reference_side, dims, rounding_bound}
    map: Dict[str, Any]
    # side → what was read (path, step, rank, entries, tensor_slots, layers …)
    sides: Dict[str, Dict[str, Any]]
    # {verdict, consistency, reason, native_prefill_status, prefill_logprob_diff, verification_axes}
    results: Dict[str, Any]
    # {boundaries, counts_round0, weights_compared, weights_exact, rounds}
    summary: Dict[str, Any]
    token_ids: Dict[str, Any]
    canonical: List[Dict[str, Any]]
    # MoE router comparison (tilake.diagnosis.moe); None for a dense model
    moe: Optional[Dict[str, Any]]
    suggestions: List[Dict[str, Any]]
    first_divergence: Optional[Dict[str, Any]]
    amplification_chain: List[ChainLink]
    points: List[PointRow]
    logic_level_points: List[str]
    rounding_level_points: List[str]
    quantisation_level_points: List[str]
    suspects: List[Any]
    # {round, boundary, status, reason} per boundary without evidence
    evidence_missing: List[Dict[str, Any]]
    hypotheses: List[Hypothesis]
    rounds: List[RoundRecord]
    stub_instruction: Optional[Dict[str, Any]]
    layout_scans: List[Dict[str, Any]]
    boundaries: List[BoundaryRow]
    # "<boundary>@<round>" of each diverging boundary
    diverging: List[str]
    # {boundary, status, reason, mismatch_count, pattern, via_op} per weight boundary
    weights: List[Dict[str, Any]]
    # optional boundaries of the map this model does not have ({boundary, layer, reason})
    not_applicable: List[Dict[str, Any]]
    # msprobe L1 (API-level) dumps: aligned API calls and their statistics (tilake.diagnosis.api_sequence)
    api_sequence: Optional[Dict[str, Any]]
    # named pitfalls of real runs checked on values ({id, name, status, evidence, fix})
    pitfalls: List[Dict[str, Any]]
    limitations: List[str]


# stub_instruction.json: the next stub round, or needed false with the reason (tilake.diagnosis.stubs)
StubInstruction = TypedDict("StubInstruction", {
    "round": int, "isolate_boundary": Any, "class": Optional[str], "needed": bool, "available": bool,
    "reason": str, "source_side": str, "target_side": str, "modules": List[Any], "modules_all": List[Any],
    "dump_after_load": bool, "msprobe_config": Dict[str, Any], "expected": Any,
}, total=False)


class ProbeSide(TypedDict):
    """What ``tilake dumps probe`` found in one side's dump: naming, counts, no tensor values."""

    path: str
    step: Optional[int]
    rank: Optional[int]
    proc: Optional[str]
    task: Optional[str]
    level: Optional[str]
    framework: str
    construct_variant: str
    stack_variant: str
    entries: int
    module_entries: int
    api_entries: int
    tensor_slots: int
    # io kind (input | output | kwarg | …) → tensor slots
    slots_by_io: Dict[str, int]
    layers: int
    # module path prefix ("Module.model.layers.{i}.") → entries, the 12 commonest
    prefixes: Dict[str, int]
    # wrapper segment (_fsdp_wrapped_module, module …) → occurrences
    wrapper_segments: Dict[str, int]
    # module class → entries
    module_classes: Dict[str, int]
    # {module, output0_shape} of modules whose names hint at fused kernels
    fused_modules: List[Dict[str, Any]]
    # API name → {calls, counter_min, counter_max}
    apis: Dict[str, Dict[str, int]]
    # module class → up to 3 {entry, input0, output0, dtype}
    sampled_shapes: Dict[str, List[Dict[str, Any]]]
    # tensor | md5 | statistics
    summary_mode: str
    pt_files_present: int
    # {entries, tensors}
    parameters_grad: Dict[str, int]
    # pytorch | mindspore
    framework_detected: str
    notes: List[str]
    warnings: List[str]


class ProbeReport(TypedDict, total=False):
    """``tilake dumps probe``: the sides given, and with both how their APIs and classes differ."""

    train: ProbeSide
    infer: ProbeSide
    # APIs both sides call a different number of times (never match API entries by name)
    api_counter_drift: List[str]
    classes_only_train: List[str]
    classes_only_infer: List[str]


class JoinPoint(TypedDict):
    """One divergent or independent point of the dump with the profile rows that compute it."""

    round: int
    boundary: str
    status: str
    tensor_ulp: Optional[float]
    # the round-0 first divergence
    first: bool
    # fct_boundary_kernels rows of the point (with "text": its aligned kernels), most severe grade first
    groups: List[Dict[str, Any]]


class DumpJoin(TypedDict):
    """The profile ⋈ dump facts of the dump report (:func:`tilake.reports.alignment.dump_join_facts`).

    ``status``: ``joined`` | ``refused`` | ``no_profile`` | ``no_lake`` (``fct_boundary_kernels.join_status``
    and the two cases without a mart); ``reason``: why not joined (None when joined).
    """

    status: str
    reason: Optional[str]
    run_id: Optional[str]
    points: List[JoinPoint]
