"""The lake's ``raw/`` tables, each defined once: columns, types, partitions, owner, grain.

Each table is a folder ``raw/<table>/`` holding Hive-style partitions
``run_id=<id>[/side=<side>/rank=<rank>]/part-*.parquet`` and nothing else, so any engine reads it as
a Hive dataset with no option beyond the partitioning flag: ``pd.read_parquet('<lake>/raw/kernels')``,
``pyarrow.dataset.dataset(..., partitioning='hive')``, DuckDB ``read_parquet('<lake>/raw/kernels/**/*.parquet',
hive_partitioning=true)``, polars/Spark. The partition columns (:func:`hive_keys`) live only in the
path (a column in both the path and the file made pyarrow fail: "Field run_id has incompatible types:
string vs dictionary"); the files hold :func:`file_columns`. One zero-row schema file per table sits
outside the partition tree, ``raw/<table>/_schema/run_id=_/[side=_/rank=0/]schema.parquet``
(:func:`schema_file_rel`): pyarrow, pandas and Spark skip ``_``-prefixed folders (the Hive metadata
convention, as ``_SUCCESS``/``_common_metadata``); a DuckDB or polars ``**/*.parquet`` glob reads it
as zero rows with the same partition keys (no "Hive partition mismatch"). It sorts before the
``run_id=`` folders, so the dbt sources take the schema from it and resolve on an empty lake. DuckDB readers pass :func:`hive_types_sql` (``rank`` is an
INTEGER, run ids stay text even when they look like numbers).

:data:`RAW_TABLES` is the one definition. Everything else is derived from it: :data:`TABLES`
and :data:`PARTITIONS` (the Python writer, :mod:`tilake.lake.store`), :data:`PROFILE_TABLES` and
:data:`DUMP_TABLES` (what a profiler ingest and a dump analysis replace per run), and
:func:`dbt_sources` (the table and column list of dbt's ``sources.yml``, checked against
``dbt_project/models/staging/*/_*__sources.yml`` by the dbt tests).

Units: every time is integer nanoseconds (``*_ns``), sizes are bytes, ``*_ulp`` units in the last
place of the tensor's native dtype. JSON-typed columns hold JSON text.
No column is HUGEINT (exports would turn it into floats). Adding a column: append it here;
``Lake.ensure`` rewrites older partitions with the column as NULL (the dbt sources read with
``union_by_name=false`` and need every file to carry every column).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple, TypedDict, Union

Column = Tuple[str, str]


@dataclass(frozen=True)
class RawTable:
    """One raw lake table (the dbt-duckdb style: a one-line comment above each field)."""

    # folder name under raw/ and the table's name in the dbt source
    name: str
    # dbt source it belongs to: "lake" (written by the profiler ingest) or "lake_dumps" (dump analysis)
    source: str
    # the grain, one sentence (the table's description in sources.yml)
    description: str
    # partition columns below run_id, in folder order
    partitions: Tuple[str, ...]
    # (column, DuckDB type, description; "" when the name says it all), in file order
    columns: Tuple[Tuple[str, str, str], ...]


#: Largest plausible time stamp (ns since the epoch, 2**62: year 2116). Times past it are not profiler times.
TIME_MAX_NS = 1 << 62
#: Longest plausible single kernel / device task (ns): one hour. A longer span is a damaged row
#: (``endNs = INT64_MAX`` gave 237-year kernels), counted invalid at ingest like a negative one.
KERNEL_MAX_NS = 3_600 * 10**9


def _cols(*specs: Any) -> Tuple[Tuple[str, str, str], ...]:
    """``("a", "VARCHAR"), ("b", "BIGINT", "what b is")`` → full ``(name, type, description)`` triples."""
    return tuple((s[0], s[1], s[2] if len(s) > 2 else "") for s in specs)


_SIDE_RANK = (("run_id", "VARCHAR"), ("side", "VARCHAR", "train | infer"), ("rank", "INTEGER"))

RAW_TABLES: Tuple[RawTable, ...] = (
    # ------------------------------------------------------------------ profiler ingest (source "lake")
    RawTable("runs", "lake", "One row per run.", (), _cols(
        ("run_id", "VARCHAR"), ("model_id", "VARCHAR"), ("model_family", "VARCHAR"),
        ("step", "INTEGER"), ("script_path", "VARCHAR"), ("collection_method", "VARCHAR"),
        ("train_backend", "VARCHAR"), ("infer_backend", "VARCHAR"),
        ("parallel_config", "VARCHAR", 'JSON {"tp":..,"pp":..,"ep":..}'),
        ("rl_config", "VARCHAR", "JSON of the parsed launch-script config"),
        ("tool_versions", "VARCHAR", 'JSON {"torch_npu":..,"cann":..,...}'),
        ("tags", "VARCHAR", 'JSON {"key":"value"}'),
        ("host", "VARCHAR"), ("source_path", "VARCHAR"), ("kind", "VARCHAR"),
        ("created_at", "TIMESTAMP", "UTC, naive"),
        ("rules", "VARCHAR", 'JSON {"dir","sha256","files"} of the user rules folder in force at ingest '
                             "(--rules / TILAKE_RULES / <lake>/rules); NULL: shipped rules only"),
        ("phases", "VARCHAR", "phases compared (--phases): NULL = default (train:actor_log_prob,infer:prefill), "
                              "'all', or 'side:phase,...' (docs/phases.md)"),
        ("settings", "VARCHAR", 'JSON {"enforce_eager":..,"HCCL_DETERMINISTIC":..,"train_tp":..,...} of the switches '
                                "that produced the kernels, each {value, source} (docs/phases.md)"),
        ("log_path", "VARCHAR", "RL console log the run's metrics were read from (--log / the scan's run.log)"),
    )),
    RawTable("captures", "lake",
             "One row per ingested profiler source (DB file, text export, unparsed raw folder or torch trace) per side and rank.",
             ("side", "rank"), _cols(
        *_SIDE_RANK,
        ("capture_id", "VARCHAR"), ("path", "VARCHAR"), ("source_kind", "VARCHAR"),
        ("sha256", "VARCHAR"), ("size_bytes", "BIGINT"), ("schema_variant", "VARCHAR"),
        ("profiler_level", "VARCHAR"), ("schema_version", "VARCHAR"),
        ("truncated", "BOOLEAN"), ("session_start_ns", "BIGINT"), ("session_end_ns", "BIGINT"),
        ("table_rows", "VARCHAR", "JSON {table: rows}"),
        ("kernel_count", "BIGINT"), ("host_op_count", "BIGINT"),
        ("status", "VARCHAR", "ok | host_fallback | evidence_missing | unparsed | error"),
        ("reason", "VARCHAR"),
        ("backend", "VARCHAR", "ascend_db | ascend_text | torch_trace"),
        ("rank_source", "VARCHAR", "file_name | profiler_info | distributedInfo (torch trace) | worker (no rank id: rank_id -1) | replica (rollout replica slot) | global_rank (relocated -globalrank) | default"),
        ("worker", "VARCHAR", "worker folder of a capture without a rank id, else the verl role or rollout replica its name or folder gives"),
        ("pid", "BIGINT", "process id from the <host>_<pid>_<ts>_ascend_pt folder name"),
        ("device_id", "INTEGER", "device of a capture without a rank id (RANK_DEVICE_MAP / NPU_INFO)"),
        ("duplicates_ignored", "VARCHAR", "JSON list of the paths of duplicate captures of this side and rank not ingested"),
        ("step_source", "VARCHAR", "where the step markers were read (STEP_TIME, kernel_details.csv Step Id, ...); NULL: none"),
        ("steps", "VARCHAR", "JSON {step: kernel calls} before the common-step restriction"),
        ("steps_kept", "VARCHAR", "JSON list of the steps counted for this capture (common to the side's ranks)"),
        ("kernels_outside_steps", "BIGINT", "kernel calls launched outside every step (kept)"),
        ("open_tail_kernels", "BIGINT", "kernel calls launched after the last step ended (kept)"),
        ("parallel_groups", "VARCHAR", "JSON {group name: global ranks} from profiler_metadata.json"),
        ("invalid_rows", "VARCHAR", "JSON {problem: rows} of rows kept but counted (invalid kernel times "
                                    "excluded from timings, repeated rows kept once); NULL when none"),
    )),
    RawTable("kernels", "lake",
             "One row per device kernel (TASK joined to COMPUTE_TASK_INFO, plus COMMUNICATION_OP) "
             "or aggregated text row (call_count > 1).", ("side", "rank"), _cols(
        *_SIDE_RANK,
        ("capture_id", "VARCHAR"), ("source_kind", "VARCHAR"),
        ("global_task_id", "BIGINT"), ("device_id", "INTEGER"), ("stream_id", "INTEGER"),
        ("task_id", "BIGINT"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"), ("dur_ns", "BIGINT"),
        ("kernel_name", "VARCHAR"), ("op_type", "VARCHAR"), ("op_type_derived", "BOOLEAN"),
        ("accelerator", "VARCHAR"), ("device_task_type", "VARCHAR"), ("block_dim", "BIGINT"),
        ("input_shapes", "VARCHAR"), ("input_dtypes", "VARCHAR"), ("input_formats", "VARCHAR"),
        ("output_shapes", "VARCHAR"), ("output_dtypes", "VARCHAR"), ("output_formats", "VARCHAR"),
        ("connection_id", "BIGINT"), ("cann_api_name", "VARCHAR"),
        ("host_op_id", "BIGINT"), ("host_op_name", "VARCHAR"), ("callchain_id", "BIGINT"),
        ("call_count", "BIGINT", "1 per device row; >1 for aggregated text rows"),
        ("step", "INTEGER", "profiler step (N of ProfilerStep#N) whose host range holds the launch; NULL: none"),
        ("match_confidence", "VARCHAR", "how host_op_id was found: connection (TASK.connectionId ⋈ CONNECTION_IDS) | "
                                        "name_order | order (no host links: launch order, kernel name) | NULL"),
        ("hf32_eligible", "VARCHAR", "COMPUTE_TASK_INFO.hf32Eligible (YES | NO; CANN since 2025-06-20); NULL: not recorded"),
    )),
    RawTable("host_ops", "lake",
             "One row per framework op (PYTORCH_API type 50001) or host API statistic row.",
             ("side", "rank"), _cols(
        *_SIDE_RANK,
        ("capture_id", "VARCHAR"), ("source_kind", "VARCHAR"),
        ("host_op_id", "BIGINT"), ("name", "VARCHAR"), ("start_ns", "BIGINT"), ("end_ns", "BIGINT"),
        ("global_tid", "BIGINT"), ("connection_id", "BIGINT"), ("sequence_number", "BIGINT"),
        ("input_shapes", "VARCHAR"), ("input_dtypes", "VARCHAR"), ("callchain_id", "BIGINT"),
        ("kernel_count", "BIGINT"), ("call_count", "BIGINT"),
    )),
    RawTable("call_stacks", "lake", "One row per frame of a PYTORCH_CALLCHAINS stack.", ("side", "rank"), _cols(
        *_SIDE_RANK,
        ("capture_id", "VARCHAR"), ("callchain_id", "BIGINT"), ("depth", "INTEGER"),
        ("frame", "VARCHAR"),
    )),
    RawTable("mstx_ranges", "lake",
             "One row per MSTX range (verl phase markers: update_actor, generate_sequences, ...).",
             ("side", "rank"), _cols(
        *_SIDE_RANK,
        ("capture_id", "VARCHAR"), ("message", "VARCHAR"), ("start_ns", "BIGINT"),
        ("end_ns", "BIGINT"), ("global_tid", "BIGINT"),
    )),
    RawTable("run_metrics", "lake",
             "One row per metric value the RL framework logged for the run (verl training/rollout_probs_diff_*, "
             "rollout_corr/*, ...), read from its console log or JSONL.", (), _cols(
        ("run_id", "VARCHAR"), ("step", "INTEGER", "RL step of the log line (verl step:N); NULL: none given"),
        ("metric", "VARCHAR", "the logged key, e.g. training/rollout_probs_diff_mean"),
        ("value", "DOUBLE"), ("source_path", "VARCHAR"), ("line_no", "BIGINT", "1-based line of the log"),
        ("format", "VARCHAR", "console | jsonl"),
    )),
    RawTable("source_notes", "lake",
             "Per-family source-path notes (models/callstack_notes.yaml) recorded with the run.", (), _cols(
        ("run_id", "VARCHAR"), ("model_family", "VARCHAR"), ("module", "VARCHAR"),
        ("side", "VARCHAR"), ("path", "VARCHAR"), ("function", "VARCHAR"), ("kernel", "VARCHAR"),
    )),
    # ------------------------------------------------------------------ dump analysis (source "lake_dumps")
    RawTable("dump_runs", "lake_dumps", "One row per analysed dump pair (run): map, verdict, task card.", (), _cols(
        ("run_id", "VARCHAR"), ("map_name", "VARCHAR"), ("reference_side", "VARCHAR"),
        ("train_path", "VARCHAR"), ("infer_path", "VARCHAR"), ("rounds", "INTEGER"),
        ("verdict", "VARCHAR", "exact | nonzero | not_run | evidence_missing"),
        ("consistency", "VARCHAR", "bitwise | rounding_only | precision_config | logic_level | unknown"),
        ("verdict_reason", "VARCHAR"), ("task_card", "VARCHAR", "JSON"),
        ("created_at", "TIMESTAMP", "UTC, naive"),
    )),
    RawTable("tensor_stats", "lake_dumps",
             "One row per dumped tensor slot per side, rank and round (float64 statistics, content hash).",
             ("side", "rank"), _cols(
        *_SIDE_RANK, ("round", "INTEGER"),
        ("step", "INTEGER"), ("entry", "VARCHAR"), ("io_kind", "VARCHAR"), ("idx", "VARCHAR"),
        ("exec_order", "INTEGER"), ("data_name", "VARCHAR"),
        ("dtype", "VARCHAR"), ("declared_dtype", "VARCHAR"), ("dtype_mismatch", "BOOLEAN"),
        ("shape", "VARCHAR", "JSON list"),
        ("numel", "BIGINT"), ("nbytes", "BIGINT", "bytes"),
        ("min", "DOUBLE"), ("max", "DOUBLE"), ("mean", "DOUBLE"), ("norm", "DOUBLE"),
        ("nan_count", "BIGINT"), ("posinf_count", "BIGINT"), ("neginf_count", "BIGINT"),
        ("content_hash", "VARCHAR"),
        ("status", "VARCHAR", "ok | missing | unreadable | no_data | msprobe_summary (no .pt: dump.json's own statistics/md5)"),
        ("reason", "VARCHAR"),
        ("md5", "VARCHAR", "msprobe's md5 field from dump.json (summary_mode md5), NULL otherwise"),
        ("stats_source", "VARCHAR", "file (tilake, float64 over the .pt) | msprobe (dump.json's Max/Min/Mean/Norm) | NULL"),
    )),
    RawTable("boundary_results", "lake_dumps",
             "One row per semantic boundary (activation or weight) per round: exact gate, ULP figures, class.",
             (), _cols(
        ("run_id", "VARCHAR"), ("round", "INTEGER"), ("kind", "VARCHAR", "activation | weight"),
        ("boundary", "VARCHAR"), ("position", "INTEGER"), ("layer", "INTEGER"), ("op", "VARCHAR"),
        ("inputs", "VARCHAR", "JSON list of boundary names"),
        ("status", "VARCHAR"), ("reason", "VARCHAR"),
        ("train_source", "VARCHAR"), ("infer_source", "VARCHAR"),
        ("train_transforms", "VARCHAR"), ("infer_transforms", "VARCHAR"),
        ("train_shape", "VARCHAR"), ("infer_shape", "VARCHAR"),
        ("train_dtype", "VARCHAR"), ("infer_dtype", "VARCHAR"),
        ("numel", "BIGINT"), ("mismatch_count", "BIGINT"), ("mismatch_fraction", "DOUBLE"),
        ("max_abs_diff", "DOUBLE"), ("ref_absmax", "DOUBLE"), ("tensor_ulp", "DOUBLE"),
        ("max_elem_ulp", "BIGINT"), ("max_elem_ulp_significant", "BIGINT"),
        ("signed_mean_ulp", "DOUBLE"), ("pos_count", "BIGINT"), ("neg_count", "BIGINT"),
        ("ulp_hist", "VARCHAR", "JSON {bin: count}"),
        ("rows_total", "BIGINT"), ("rows_differing", "BIGINT"),
        ("cols_total", "BIGINT"), ("cols_differing", "BIGINT"), ("pattern", "VARCHAR"),
        ("systematic_bias", "BOOLEAN"), ("inputs_equal", "BOOLEAN"),
        ("class", "VARCHAR", "rounding-level | logic-level | quantisation-level | NULL"),
        ("class_evidence", "VARCHAR", "JSON list"),
        ("notes", "VARCHAR", "JSON list (transforms applied, layout scans)"),
        ("role", "VARCHAR", "independent_point | propagated | suspect | NULL (equal/not compared)"),
        # the dump verdict of the round, written once by the Python analysis (the marts read it)
        ("first_divergence_status", "VARCHAR", "found | none | undetermined (the round's; activation rows)"),
        ("is_first_divergence", "BOOLEAN", "this boundary is the round's first divergence"),
        ("growth_vs_first", "DOUBLE", "max_abs_diff / the first divergence's (amplification chain)"),
        ("downstream_differing", "BIGINT", "independent points: differing boundaries after it"),
        ("downstream_max_abs_diff", "DOUBLE", "independent points: largest max_abs_diff after it"),
        ("amplification", "DOUBLE", "downstream_max_abs_diff / max_abs_diff"),
    )),
    RawTable("stub_rounds", "lake_dumps",
             "One row per stub round: instruction (issued after round - 1), verification, outcome.", (), _cols(
        ("run_id", "VARCHAR"), ("round", "INTEGER"), ("isolated_boundary", "VARCHAR"),
        ("source_side", "VARCHAR"), ("target_side", "VARCHAR"), ("available", "BOOLEAN"),
        ("instruction", "VARCHAR", "JSON"),
        ("verified", "BOOLEAN", "NULL when that round's dumps were not supplied"),
        ("verification", "VARCHAR", "JSON"),
        ("outcome", "VARCHAR"),
    )),
    RawTable("dump_gates", "lake_dumps",
             "One row per run gated by tilake dumps gate (the latest gate of the run; a new dump analysis of the "
             "run replaces it): outcome, counts, first failing boundary.", (), _cols(
        ("run_id", "VARCHAR"),
        ("outcome", "VARCHAR", "pass | fail | evidence_missing (mapped boundaries not compared)"),
        ("passed", "BOOLEAN"),
        ("line", "VARCHAR", "the one line the gate printed"),
        ("map_name", "VARCHAR"), ("train_path", "VARCHAR"), ("infer_path", "VARCHAR"),
        ("budget_path", "VARCHAR", "ULP budget file (--budget); NULL: bitwise only"),
        ("budget_sha256", "VARCHAR", "sha256 of the budget file's bytes"),
        ("budget", "VARCHAR", "JSON list of {pattern, max_elem_ulp, tensor_ulp}"),
        ("mapped", "INTEGER", "boundaries with a selector on both sides (activations and weights, round 0)"),
        ("exact", "INTEGER", "mapped boundaries bitwise equal"),
        ("within_budget", "INTEGER", "mapped boundaries differing within their ULP budget"),
        ("failing", "INTEGER", "mapped boundaries differing beyond their budget or not bitwise comparable"),
        ("uncompared", "INTEGER", "mapped boundaries without compared values (MISSING / evidence_missing)"),
        ("not_mapped", "INTEGER", "boundaries the map leaves out on one side (counted, never gated)"),
        ("first_failing_boundary", "VARCHAR", "in the map's order, activations then weights; NULL: none"),
        ("first_failing_status", "VARCHAR"),
        ("first_failing_max_elem_ulp", "DOUBLE", "ULP of the native dtype; NULL: not a compared NOT_EXACT"),
        ("max_elem_ulp", "DOUBLE", "largest per-element ULP distance over the compared boundaries"),
        ("failures", "VARCHAR", "JSON list of the failing and not-compared boundaries with status, ULP and reason"),
        ("gated_at", "TIMESTAMP", "UTC, naive"),
    )),
    # ------------------------------------------------------------------ kernel alignment (source "lake_align")
    RawTable("kernel_layers", "lake_align",
             "One row per side and transformer layer of the forward pass aligned (tilake.diagnosis.kernel_align); "
             "a side without layers has one row with layer NULL and the reason.", (), _cols(
        ("run_id", "VARCHAR"), ("side", "VARCHAR", "train | infer"), ("rank", "INTEGER"),
        ("forward_window", "VARCHAR", "the forward pass aligned, e.g. 'forward 1 of 24'"),
        ("forward_count", "INTEGER", "forward passes found on this side and rank"),
        ("forwards_identical", "INTEGER", "forward passes with the same signature sequence as the aligned one"),
        ("layer", "INTEGER", "0-based; NULL: no layers found"),
        ("start_pos", "INTEGER", "first kernel of the layer (0-based position in the forward pass)"),
        ("end_pos", "INTEGER", "one past the layer's last kernel"),
        ("kernel_count", "INTEGER"),
        ("kernels", "VARCHAR", "the layer's op types in launch order, ' → '-joined"),
        ("method", "VARCHAR", "period+call_stack | period | none"),
        ("confidence", "DOUBLE", "0..1 (periodicity, lower without a confirming call-stack frame)"),
        ("period", "INTEGER", "kernels per typical layer"),
        ("anchor", "VARCHAR", "signature (category/module/base op/shape class) whose occurrences start the layers"),
        ("frame", "VARCHAR", "call-stack frame confirming the split (models/layer_frames.yaml); NULL: none"),
        ("odd", "BOOLEAN", "kernel sequence differs from this side's most common layer"),
        ("odd_reason", "VARCHAR"),
        ("status", "VARCHAR", "ok | partial | evidence_missing (the run's alignment)"),
        ("reason", "VARCHAR"),
        ("created_at", "TIMESTAMP", "UTC, naive"),
    )),
    RawTable("kernel_alignment", "lake_align",
             "One row per aligned group of one layer pair: training kernels ↔ inference kernels, relation, "
             "confidence, evidence (tilake.diagnosis.kernel_align).", (), _cols(
        ("run_id", "VARCHAR"), ("phase_pair", "VARCHAR", "forward passes aligned, 'train forward 1 of 24 ↔ infer forward 1 of 8'"),
        ("train_rank", "INTEGER"), ("infer_rank", "INTEGER"),
        ("layer", "INTEGER", "0-based, the same index on both sides"),
        ("position", "INTEGER", "0-based order of the group within the layer's alignment"),
        ("relation", "VARCHAR", "same | fused | split | different_impl | only_train | only_infer"),
        ("confidence", "DOUBLE", "0..1"),
        ("evidence", "VARCHAR", "JSON list of sentences (shapes, catalog relation, stack frames)"),
        ("fused_side", "VARCHAR", "fused / split: the side running the single kernel"),
        ("module", "VARCHAR", "comparison module (the fused kernel's, else the first kernel's)"),
        ("category", "VARCHAR"),
        ("train_first", "INTEGER", "first training kernel's position within the layer; NULL: none"),
        ("train_last", "INTEGER"), ("infer_first", "INTEGER"), ("infer_last", "INTEGER"),
        ("train_kernels", "VARCHAR", "op types ' → '-joined"), ("infer_kernels", "VARCHAR"),
        ("train_kernel_names", "VARCHAR", "JSON list"), ("infer_kernel_names", "VARCHAR", "JSON list"),
        ("train_shapes", "VARCHAR", "input shapes of the first kernel"), ("infer_shapes", "VARCHAR"),
        ("odd_layer", "BOOLEAN", "this layer's alignment differs from most layers'"),
        ("odd_reason", "VARCHAR"),
    )),
)

# derived views of RAW_TABLES (tests may monkeypatch TABLES entries to simulate a schema change)
TABLES: Dict[str, List[Column]] = {t.name: [(c, ty) for c, ty, _d in t.columns] for t in RAW_TABLES}
PARTITIONS: Dict[str, List[str]] = {t.name: list(t.partitions) for t in RAW_TABLES}


# one value of a raw-table column as the Python writer takes it: NULL, BOOLEAN, BIGINT/INTEGER, DOUBLE, VARCHAR,
# or a list / mapping stored as JSON text in a VARCHAR/JSON column (RunWriter.rows_table)
LakeValue = Union[None, bool, int, float, str, Sequence[object], Mapping[str, object]]
# one row of a raw table: column name (a name of TABLES[table]; a missing column is NULL) → its value
LakeRow = Mapping[str, LakeValue]


class Partition(TypedDict, total=False):
    """The partition values of rows the Python writer writes below ``run_id=…`` (:data:`PARTITIONS`)."""

    # train | infer
    side: str
    rank: int


# the tables a profiler ingest owns (replaced together when a run is re-ingested)
PROFILE_TABLES: List[str] = [t.name for t in RAW_TABLES if t.source == "lake"]
# the tables a dump analysis owns (replaced together when a run's dumps are analysed again)
DUMP_TABLES: List[str] = [t.name for t in RAW_TABLES if t.source == "lake_dumps"]
# the tables the kernel alignment owns (replaced together when a run is aligned again)
ALIGN_TABLES: List[str] = [t.name for t in RAW_TABLES if t.source == "lake_align"]

SOURCE_DESCRIPTIONS = {
    "lake": "Hive-partitioned Parquet written by tilake ingest (lake/raw/<table>/run_id=.../...).",
    "lake_dumps": "msprobe dump analysis tables written by tilake (diagnosis/lake_rows.py), "
                  "Hive-partitioned Parquet.",
    "lake_align": "kernel-sequence alignment tables written by tilake (pipeline/align.py, "
                  "diagnosis/kernel_align.py), Hive-partitioned Parquet.",
}


def hive_keys(table: str) -> List[str]:
    """Partition columns of ``table`` in folder order: ``run_id`` then :data:`PARTITIONS` (path only)."""
    return ["run_id"] + PARTITIONS[table]


def file_columns(table: str) -> List[Column]:
    """The ``(name, type)`` columns stored inside each Parquet file of ``table``: its :data:`TABLES`
    columns less the partition columns (:func:`hive_keys`), in order."""
    keys = set(hive_keys(table))
    return [(c, ty) for c, ty in TABLES[table] if c not in keys]


def hive_types_sql(table: str) -> str:
    """DuckDB ``hive_types`` struct of ``table``'s partition columns, e.g.
    ``{'run_id': VARCHAR, 'side': VARCHAR, 'rank': INTEGER}`` (types from :data:`TABLES`)."""
    types = dict(TABLES[table])
    return "{" + ", ".join(f"'{k}': {types[k]}" for k in hive_keys(table)) + "}"


def schema_file_rel(table: str) -> str:
    """Path of ``table``'s zero-row schema file relative to the lake root:
    ``raw/<table>/_schema/run_id=_[/side=_/rank=0]/schema.parquet`` (a value of each partition column's type)."""
    types = dict(TABLES[table])
    parts = [f"{k}={'0' if types[k] in ('INTEGER', 'BIGINT') else '_'}" for k in hive_keys(table)]
    return "/".join(["raw", table, "_schema", *parts, "schema.parquet"])


# how dbt-duckdb reads every source table (the schema file sorts first and fixes the columns, see the
# module docstring); {tilake_hive_types} comes from the table's meta (dbt merges source and table meta,
# dbt-duckdb formats the template with it)
EXTERNAL_LOCATION = ("read_parquet('{{ env_var('TILAKE_LAKE', '../tilake-lake') }}/raw/{name}/**/*.parquet', "
                     "hive_partitioning=true, hive_types={tilake_hive_types}, union_by_name=false)")


def dbt_sources() -> Dict[str, Any]:
    """The dbt ``sources.yml`` content rendered from :data:`RAW_TABLES`.

    Returns:
        ``{"version": 2, "sources": [{"name", "description", "meta": {"external_location"},
        "tables": [{"name", "description", "meta": {"tilake_hive_types"},
        "columns": [{"name", "data_type", "description"?}]}]}]}``,
        one source per :attr:`RawTable.source` in definition order (``lake``, ``lake_dumps``), tables
        and columns in file order; ``data_type`` is the DuckDB type. A column's ``description`` is
        present only when the schema gives one.
    """
    sources: Dict[str, Dict[str, Any]] = {}
    for t in RAW_TABLES:
        src = sources.setdefault(t.source, {"name": t.source, "description": SOURCE_DESCRIPTIONS[t.source],
                                            "meta": {"external_location": EXTERNAL_LOCATION}, "tables": []})
        cols = [{"name": c, "data_type": ty, **({"description": d} if d else {})} for c, ty, d in t.columns]
        meta = {"tilake_hive_types": hive_types_sql(t.name)}
        src["tables"].append({"name": t.name, "description": t.description, "meta": meta, "columns": cols})
    return {"version": 2, "sources": list(sources.values())}


def null_list(columns: List[Column]) -> str:
    """``CAST(NULL AS type) AS col, ...`` for the given ``(name, type)`` columns (empty schema
    relations, columns added to old partitions)."""
    return ", ".join(f'CAST(NULL AS {t}) AS "{c}"' for c, t in columns)
