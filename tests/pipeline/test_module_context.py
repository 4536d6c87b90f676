"""Module by context, not by op name (docs/rules.md "Module by context").

A basic op (mul, add, neg, cat, ...) sits in a fused family's row (RoPE, norm, attention) only when its context
says so: the call stack (torch ``with_stack`` frames, ``nn.Module: <class>_<n>`` module frames, Ascend
PYTORCH_CALLCHAINS) or a ``record_function`` range; with no context it stays in Elementwise on both sides.

Inputs: CPU-only traces written by ``tests/fixtures/cpu_trace_writer.py`` (event schema of the real verl 0.9.1
training trace and of ``tests/data/torch_cpu_trace``: HF Qwen2 modules on the training side, vLLM-CPU custom ops on
the rollout side), and the real verl traces of ``shared/verl-cpu/traces`` (no stack: every mul/add unplaced).
One lake, one dbt build.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from cpu_trace_writer import ann, hf_layer, make_cpu_trace, op, py
from profiler_helpers import mart

from tilake.lake.store import Lake
from tilake.lake.warehouse import dbt_build
from tilake.pipeline.profile import collect_captures, ingest_profile

VLLM_NORM = [op("aten::pow"), op("aten::mean"), op("aten::add"), op("aten::rsqrt"), op("aten::mul"), op("aten::mul")]


def _vllm_layer():
    """vLLM-CPU Qwen2 decoder layer as the real rollout trace runs it (enforce_eager, no stack): native RMSNorm
    arithmetic, _C::rotary_embedding, the attention custom ops, residual adds, SiLU and mul."""
    return [*VLLM_NORM, op("aten::addmm"), op("_C::rotary_embedding"),
            op("vllm::unified_kv_cache_update", op("_C::cpu_attn_reshape_and_cache")),
            op("vllm::unified_attention_with_output", op("_C::cpu_attention_with_kv_cache")),
            op("aten::addmm"), op("aten::add"), *VLLM_NORM, op("aten::mm"), op("aten::silu"), op("aten::mul"),
            op("aten::mm"), op("aten::add")]


def _train(root: Path, with_stack: bool) -> None:
    # HF Qwen2 (2 layers) under verl's log-prob annotation, plus a loss mul outside any module
    tree = [ann("actor_compute_log_prob", py("verl/workers/actor/dp_actor.py(300): _forward_micro_batch",
                                             op("aten::index_select"), hf_layer(0), hf_layer(1),
                                             py("verl/trainer/ppo/core_algos.py(900): compute_policy_loss",
                                                op("aten::mul"))))]
    make_cpu_trace(root / "actor-rollout_train_step1_rank0-of-1_pid14185_20261201184328807.json.gz", tree,
                   with_stack=with_stack)


def _infer(root: Path, rope_range: bool = False) -> None:
    body = [op("aten::index_select")]
    for _ in range(2):
        layer = _vllm_layer()
        if rope_range:   # the rotary arithmetic unfused, inside a record_function('rope') range
            i = layer.index(next(x for x in layer if x[1] == "_C::rotary_embedding"))
            layer[i] = ann("rope", op("aten::mul"), op("aten::neg"), op("aten::cat"), op("aten::mul"),
                           op("aten::add"))
        body += layer
    tree = [ann("execute_context_1(40)_generation_0(0)", *body)]
    make_cpu_trace(root / "agent_loop_rollout_replica_0" / "1-rank-0.2.pt.trace.json.gz", tree, with_stack=False,
                   header={"vllm_version": "0.30.0"})


@pytest.fixture(scope="module")
def lake(tmp_path_factory, shared_dir):
    tmp = tmp_path_factory.mktemp("ctx")
    lk = Lake(tmp / "lake")
    runs = {"stack": dict(with_stack=True), "nostack": dict(with_stack=False),
            "range": dict(with_stack=True, rope_range=True)}
    for rid, kw in runs.items():
        root = tmp / rid
        _train(root, kw["with_stack"])
        _infer(root, kw.get("rope_range", False))
        ingest_profile(lk, rid, collect_captures(root), {"step": 1}, progress=False)
    verl = shared_dir / "verl-cpu" / "traces"
    if verl.is_dir():
        ingest_profile(lk, "verl", collect_captures(verl), {"step": 1}, progress=False)
    res = dbt_build(lk, progress=False)
    assert res.success and not res.failures, res.failures
    return lk


def _rows(lk, rid):
    return {m: dict(t=dict(zip(to or [], tc or [])), i=dict(zip(io or [], ic or [])), grade=g, rule=r)
            for m, to, tc, io, ic, g, r in mart(lk.root, f"""select module, train_ops, train_op_calls, infer_ops,
                infer_op_calls, grade, rule_id from fct_op_comparison where run_id = '{rid}'""")}


def test_rope_row_holds_the_rotary_arithmetic_its_stack_names(lake):
    rows = _rows(lake, "stack")
    # 2 layers × (q and k) × (2 mul, 1 neg, 1 cat, 1 add) of apply_rotary_pos_emb / rotate_half
    assert rows["rope"]["t"] == {"aten::mul": 8, "aten::neg": 4, "aten::cat": 4, "aten::add": 4}
    assert rows["rope"]["i"] == {"_C::rotary_embedding": 2}
    assert (rows["rope"]["grade"], rows["rope"]["rule"]) == ("red", "fused_vs_unfused")
    # the RMSNorm arithmetic sits in the norm row by its module frame, the residual adds by the decoder layer's
    assert rows["residual_norm"]["t"] == {"aten::mul": 8, "aten::add": 8, "aten::pow": 4, "aten::mean": 4,
                                          "aten::rsqrt": 4}
    # SwiGLU's product by the MLP module frame; the loss mul has a frame no rule names: Elementwise
    assert rows["activation"]["t"] == {"aten::silu": 2, "aten::mul": 2}
    assert rows["elementwise"]["t"] == {"aten::mul": 1}
    # q/k/v/o projections stay MatMul (nn.Linear frame names no family)
    assert rows["linear"]["t"] == {"aten::addmm": 6, "aten::mm": 8}


def test_the_same_ops_without_context_stay_elementwise_on_both_sides(lake):
    rows = _rows(lake, "nostack")
    # training without with_stack: not one mul/add/neg/cat joins the RoPE or norm row by its name
    assert "rope" not in rows or not rows["rope"]["t"]
    assert "residual_norm" not in rows
    assert rows["elementwise"]["t"]["aten::mul"] == 8 + 8 + 2 + 1 and rows["elementwise"]["t"]["aten::neg"] == 4
    assert rows["elementwise"]["i"]["aten::mul"] == 2 * 5
    # RoPE fused on the rollout, its replaced ops unplaced on the training side: not comparable, never green
    assert rows["rope"]["i"] == {"_C::rotary_embedding": 2}
    assert (rows["rope"]["grade"], rows["rope"]["rule"]) == ("evidence_missing", "one_side_basic_unplaced")


def test_a_record_function_range_names_the_module(lake):
    rows = _rows(lake, "range")
    assert rows["rope"]["i"] == {"aten::mul": 4, "aten::neg": 2, "aten::cat": 2, "aten::add": 2}
    assert rows["rope"]["t"] == {"aten::mul": 8, "aten::neg": 4, "aten::cat": 4, "aten::add": 4}


def test_real_verl_step_rope_row_is_rotary_only(lake, shared_dir):
    if not (shared_dir / "verl-cpu" / "traces").is_dir():
        pytest.skip("real verl-cpu traces not found")
    rows = _rows(lake, "verl")
    # the real FSDP2 trace has no with_stack: cos/sin (the rotary table) are RoPE by their catalog row; the 46
    # mul and 32 add of norms, residuals and SwiGLU are not rotary arithmetic and stay Elementwise
    assert set(rows["rope"]["t"]) == {"aten::cos", "aten::sin"}
    assert set(rows["rope"]["i"]) == {"_C::rotary_embedding"}
    assert "aten::mul" in rows["elementwise"]["t"] and "aten::add" in rows["elementwise"]["t"]
    assert "aten::mul" in rows["elementwise"]["i"]
