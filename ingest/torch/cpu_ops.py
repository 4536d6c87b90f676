"""Which CPU ops of a CPU-only PyTorch-profiler trace stand for kernels (a run with no device events).

On a device, an op launches kernels; on a CPU the evidence is the ops themselves, so one op per unit of work
must be picked from the nested ``cpu_op`` tree (``aten::linear`` > ``aten::addmm`` > ``aten::copy_``). The
rule (:func:`cpu_evidence_ops`), checked on the real verl 0.9.1 traces of ``shared/verl-cpu/traces`` (FSDP2
actor, vLLM-CPU rollout, torch 2.10 profiler):

1. candidates are dispatcher ops (``namespace::op``: ``aten::mul``, ``_C::rotary_embedding``,
   ``c10d::allreduce_``) outside :data:`NO_KERNEL_OPS` (views, metadata, allocation), autograd wrappers and
   ops on 0-d/scalar inputs only (recorded shapes hold no sized dimension); records without a namespace are
   not ops (``PythonSubclass`` / ``PythonDispatchMode`` dispatch records, ``TorchDynamo Cache Lookup``,
   ``## Call CompiledFxGraph … ##``), and ops inside a compile-time range (``… (dynamo_timed)``: tracing on
   fake tensors, the rollout's first sampler call) computed nothing;
2. a candidate with no other candidate nested inside is evidence — except that :data:`HELPER_OPS` (the copy,
   fill and resize an op does for itself) nested inside a computing op belong to it: ``aten::addmm`` on CPU
   copies its bias into the output first (``aten::addmm`` > ``aten::copy_``), ``aten::add`` with a scalar
   tensor converts it (``aten::add`` > ``aten::_to_copy`` > ``aten::copy_``), ``aten::sum`` fills its output;
   counting the copy instead would hide every q/k/v projection of a Qwen2 layer. A helper outside any
   computing op (``x.to(torch.float32)``: ``aten::_to_copy`` > ``aten::copy_``) is evidence itself
   (its innermost helper), as before.
"""
from __future__ import annotations

from tilake.lake.duck import sql_str

# CPU ops that only make views, read metadata or allocate: on a device they launch no kernel, so a
# CPU-only trace skips them when it picks the ops that stand for kernels (PyTorch docs "Tensor Views"
# lists the view ops; empty*/resolve_* allocate or flip flags).
NO_KERNEL_OPS = (
    "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::as_strided", "aten::view",
    "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape", "aten::expand", "aten::expand_as",
    "aten::transpose", "aten::t", "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::slice",
    "aten::select", "aten::detach", "aten::detach_", "aten::alias", "aten::resolve_conj",
    "aten::resolve_neg", "aten::lift_fresh", "aten::unbind", "aten::split", "aten::split_with_sizes",
    "aten::chunk", "aten::narrow", "aten::view_as", "aten::flatten", "aten::unflatten", "aten::numel",
    "aten::size", "aten::stride", "aten::is_nonzero", "aten::_has_compatible_shallow_copy_type",
    "aten::set_", "aten::_nested_tensor_from_mask_left_aligned", "detach", "detach_", "aten::movedim",
    "aten::diagonal", "aten::unfold", "aten::_local_scalar_dense", "aten::item", "aten::result_type",
    "aten::to", "aten::contiguous", "aten::new_empty", "aten::new_empty_strided", "aten::zeros_like",
    "aten::type_as", "aten::lift_fresh_copy", "aten::clone",
)
# autograd wrappers (``MmBackward0``, ``autograd::engine::evaluate_function: …``,
# ``torch::autograd::AccumulateGrad``): their work is the aten ops nested inside them
AUTOGRAD_WRAPPER_RE = r"(Backward[0-9]*$|^(torch::)?autograd::)"
# copies, fills and resizes an op does for its own output or operands: inside a computing op they are part of
# it, outside one they are the evidence (a cast, a contiguous copy, a fill)
HELPER_OPS = ("aten::copy_", "aten::_to_copy", "aten::copy", "aten::_copy_from", "aten::_copy_from_and_resize",
              "aten::fill_", "aten::zero_", "aten::resize_")
# compile-time ranges (torch._dynamo utils dynamo_timed: "<phase> (dynamo_timed)"): ops inside ran on fake tensors
COMPILE_RANGE_RE = r"\(dynamo_timed\)$"


def cpu_evidence_ops(con, ops: str, out: str) -> None:
    """Create the temp table ``out`` ``(idx)``: the ops of the staged ``ops`` table that stand for kernels.

    Args:
        con: the DuckDB connection holding the staged tables. ops: name of the staged ``cpu_op`` table
            (``idx``, ``name``, ``pid``, ``tid``, ``ts``, ``dur`` in ns, ``dims``). out: name of the temp table.
    Notes:
        Nesting is by time on one pid/tid (start then longest first): an op holds the next one that starts
        before it ends. Runs in DuckDB on the staged columns, no Python row loop.
    """
    skip = ", ".join(sql_str(x) for x in NO_KERNEL_OPS)
    helpers = ", ".join(sql_str(x) for x in HELPER_OPS)
    con.execute(f"""CREATE TEMP TABLE "{out}" AS
        WITH comp AS (
            SELECT pid, tid, ts, ts + dur AS e FROM "{ops}" WHERE regexp_matches(name, {sql_str(COMPILE_RANGE_RE)})
        ),
        c AS (
            SELECT o.idx, o.pid, o.tid, o.ts, o.ts + o.dur AS e, o.name IN ({helpers}) AS helper
            FROM "{ops}" o
            WHERE contains(o.name, '::') AND o.name NOT IN ({skip})
              AND NOT regexp_matches(o.name, {sql_str(AUTOGRAD_WRAPPER_RE)})
              AND NOT coalesce(NOT regexp_matches(o.dims, '\\[[0-9]'), false)
              AND NOT EXISTS (SELECT 1 FROM comp x WHERE x.pid IS NOT DISTINCT FROM o.pid
                              AND x.tid IS NOT DISTINCT FROM o.tid AND x.ts <= o.ts AND o.ts < x.e)
        ),
        leaf AS (
            SELECT idx, pid, tid, ts, e, helper FROM (
                SELECT *, lead(ts) OVER (PARTITION BY pid, tid, helper ORDER BY ts, e DESC, idx) AS nxt FROM c)
            WHERE nxt IS NULL OR nxt >= e
        ),
        compute AS (SELECT * FROM leaf WHERE NOT helper),
        helper AS (SELECT * FROM leaf WHERE helper)
        SELECT idx FROM compute
        UNION ALL
        SELECT h.idx FROM helper h
        ASOF LEFT JOIN compute k
          ON k.pid IS NOT DISTINCT FROM h.pid AND k.tid IS NOT DISTINCT FROM h.tid AND h.ts >= k.ts
        WHERE k.idx IS NULL OR h.e > k.e""")
