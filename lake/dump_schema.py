"""Raw lake tables written by the msprobe dump reader (owned by the dump-analysis code).

Merged into :data:`tilake.lake.schema.TABLES` / ``PARTITIONS`` at import time. Partition
columns (run_id, side, rank) are stored inside the rows too. JSON-typed columns hold JSON text.
Units: ``*_ulp`` are units in the last place of the tensor's native dtype; ``nbytes`` bytes.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

DUMP_TABLES: Dict[str, List[Tuple[str, str]]] = {
    # one row per analysed dump pair (run): paths, map, verdict, task card
    "dump_runs": [
        ("run_id", "VARCHAR"), ("map_name", "VARCHAR"), ("reference_side", "VARCHAR"),
        ("train_path", "VARCHAR"), ("infer_path", "VARCHAR"), ("rounds", "INTEGER"),
        ("verdict", "VARCHAR"),          # exact | nonzero | not_run | evidence_missing
        ("consistency", "VARCHAR"),      # bitwise | rounding_only | logic_level | unknown
        ("verdict_reason", "VARCHAR"), ("task_card", "VARCHAR"),  # JSON
        ("created_at", "TIMESTAMP"),
    ],
    # one row per dumped tensor slot (partition: run_id / side / rank)
    "tensor_stats": [
        ("run_id", "VARCHAR"), ("side", "VARCHAR"), ("rank", "INTEGER"), ("round", "INTEGER"),
        ("step", "INTEGER"), ("entry", "VARCHAR"), ("io_kind", "VARCHAR"), ("idx", "VARCHAR"),
        ("exec_order", "INTEGER"), ("data_name", "VARCHAR"),
        ("dtype", "VARCHAR"), ("declared_dtype", "VARCHAR"), ("dtype_mismatch", "BOOLEAN"),
        ("shape", "VARCHAR"),            # JSON list
        ("numel", "BIGINT"), ("nbytes", "BIGINT"),
        ("min", "DOUBLE"), ("max", "DOUBLE"), ("mean", "DOUBLE"), ("norm", "DOUBLE"),
        ("nan_count", "BIGINT"), ("posinf_count", "BIGINT"), ("neginf_count", "BIGINT"),
        ("content_hash", "VARCHAR"),
        ("status", "VARCHAR"),           # ok | missing | unreadable | no_data
        ("reason", "VARCHAR"),
    ],
    # one row per semantic boundary per round (activation and weight boundaries)
    "boundary_results": [
        ("run_id", "VARCHAR"), ("round", "INTEGER"), ("kind", "VARCHAR"),  # activation | weight
        ("boundary", "VARCHAR"), ("position", "INTEGER"), ("layer", "INTEGER"), ("op", "VARCHAR"),
        ("inputs", "VARCHAR"),           # JSON list of boundary names
        ("status", "VARCHAR"), ("reason", "VARCHAR"),
        ("train_source", "VARCHAR"), ("infer_source", "VARCHAR"),
        ("train_transforms", "VARCHAR"), ("infer_transforms", "VARCHAR"),
        ("train_shape", "VARCHAR"), ("infer_shape", "VARCHAR"),
        ("train_dtype", "VARCHAR"), ("infer_dtype", "VARCHAR"),
        ("numel", "BIGINT"), ("mismatch_count", "BIGINT"), ("mismatch_fraction", "DOUBLE"),
        ("max_abs_diff", "DOUBLE"), ("ref_absmax", "DOUBLE"), ("tensor_ulp", "DOUBLE"),
        ("max_elem_ulp", "BIGINT"), ("max_elem_ulp_significant", "BIGINT"),
        ("signed_mean_ulp", "DOUBLE"), ("pos_count", "BIGINT"), ("neg_count", "BIGINT"),
        ("ulp_hist", "VARCHAR"),         # JSON {bin: count}
        ("rows_total", "BIGINT"), ("rows_differing", "BIGINT"),
        ("cols_total", "BIGINT"), ("cols_differing", "BIGINT"), ("pattern", "VARCHAR"),
        ("systematic_bias", "BOOLEAN"), ("inputs_equal", "BOOLEAN"),
        ("class", "VARCHAR"),            # rounding-level | logic-level | NULL
        ("class_evidence", "VARCHAR"),   # JSON list
        ("notes", "VARCHAR"),            # JSON list (transforms applied, layout scans)
        ("role", "VARCHAR"),             # independent_point | propagated | suspect | NULL (equal/not compared)
        # the dump verdict of the round, written once by the Python analysis (the marts read it)
        ("first_divergence_status", "VARCHAR"),  # found | none | undetermined (the round's; activation rows)
        ("is_first_divergence", "BOOLEAN"),
        ("growth_vs_first", "DOUBLE"),   # max_abs_diff / the first divergence's (amplification chain)
        ("downstream_differing", "BIGINT"),      # independent points: differing boundaries after it
        ("downstream_max_abs_diff", "DOUBLE"),   # independent points: largest max_abs_diff after it
        ("amplification", "DOUBLE"),     # downstream_max_abs_diff / max_abs_diff
    ],
    # one row per stub round (instruction issued after round - 1, verification seen in round)
    "stub_rounds": [
        ("run_id", "VARCHAR"), ("round", "INTEGER"), ("isolated_boundary", "VARCHAR"),
        ("source_side", "VARCHAR"), ("target_side", "VARCHAR"), ("available", "BOOLEAN"),
        ("instruction", "VARCHAR"),      # JSON
        ("verified", "BOOLEAN"),         # NULL when that round's dumps were not supplied
        ("verification", "VARCHAR"),     # JSON
        ("outcome", "VARCHAR"),
    ],
}

DUMP_PARTITIONS: Dict[str, List[str]] = {
    "dump_runs": [],
    "tensor_stats": ["side", "rank"],
    "boundary_results": [],
    "stub_rounds": [],
}

DUMP_OWNED = list(DUMP_TABLES)
