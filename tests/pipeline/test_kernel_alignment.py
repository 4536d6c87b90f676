"""Kernel alignment per layer (diagnosis/kernel_align.py, pipeline/align.py, marts/alignment) and the
profile ⋈ dump join (fct_boundary_kernels).

Inputs: the bundled example capture (``tilake.synth``: real torch_npu DB schema, synthetic kernels: 28
layers, Megatron train forward vs vLLM-ascend prefill), an edited copy of it with one inference layer
that falls back to an unfused Add + RmsNorm, and dumps written by ``tests/fixtures/msprobe_writer.py``
(msprobe 26.2.0 layout; train HF eager attention vs infer SDPA: the first divergence is L0.attn_core.out).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tilake.diagnosis.kernel_align import Kernel, align_layer, align_step
from tilake.lake.duck import connect
from tilake.lake.store import Lake
from tilake.pipeline.example import EXAMPLE_META, run_example
from tilake.pipeline.profile import run_profile
from tilake.synth.layout import make_profiler_output
from tilake.synth.population import JobConfig, infer_population
from tilake.synth.records import make_op


def q(lake: Path, sql: str, **params):
    con = connect(Path(lake) / "warehouse.duckdb", read_only=True)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


# ------------------------------------------------------------------------------ unit: one layer

def _k(base, cat, mod, shapes="8,1024", fused=False, replaces=(), equiv="", op=None):
    return Kernel(pos=0, name=op or base, op_type=op or base, base=base, category=cat, module=mod, fused=fused,
                  replaces=tuple(replaces), equiv=equiv, shapes=shapes)


ADD = _k("Add", "elementwise", "elementwise", "8,1,1024;8,1,1024")
NORM = _k("RmsNorm", "norm", "residual_norm", "8,1,1024;1024", fused=True, equiv="rms_norm")
ARNB = _k("AddRmsNormBias", "norm", "residual_norm", "8,1024;8,1024;1024;1024", fused=True,
          replaces=("Add", "RmsNorm"), equiv="rms_norm")
MM = _k("MatMul", "matmul", "linear", "8,1024;1024,4096", op="MatMulV2")
MM2 = _k("MatMul", "matmul", "linear", "8,2048;2048,1024", op="MatMulV2")
FA = _k("FlashAttention", "attention", "attention", fused=True, replaces=("BatchMatMul", "Softmax", "BatchMatMul"),
        equiv="attention_core", op="FlashAttentionScore")
FIA = _k("FusedInferAttention", "attention", "attention", fused=True,
         replaces=("BatchMatMul", "Softmax", "BatchMatMul"), equiv="attention_core", op="FusedInferAttentionScore")
BMM = _k("BatchMatMul", "matmul", "attention", op="BatchMatMulV2")
SMX = _k("Softmax", "softmax", "softmax", op="SoftmaxV2")


def test_fused_kernel_aligns_with_the_span_it_replaces():
    pairs = align_layer([MM, FA, MM2, ADD, NORM, MM], [MM, FIA, MM2, ARNB, MM])
    got = [(p.relation, p.train, p.infer) for p in pairs]
    assert got == [("same", [0], [0]), ("different_impl", [1], [1]), ("same", [2], [2]),
                   ("fused", [3, 4], [3]), ("same", [5], [4])]
    fused = pairs[3]
    assert fused.fused_side == "infer" and fused.confidence == 0.9
    assert "AddRmsNormBias replaces Add+RmsNorm" in fused.evidence[0]


def test_unfused_attention_on_one_side_is_one_fused_group_not_three_gaps():
    pairs = align_layer([MM, BMM, SMX, BMM, MM2], [MM, FIA, MM2])
    assert [(p.relation, p.train, p.infer, p.fused_side) for p in pairs] == [
        ("same", [0], [0], ""), ("fused", [1, 2, 3], [1], "infer"), ("same", [4], [2], "")]


def test_an_extra_kernel_shifts_nothing_after_it():
    """TraceLens #951: positional pairing mispairs everything after one extra kernel; alignment does not."""
    extra = _k("Cast", "cast", "cast_layout", "8,1024")
    pairs = align_layer([MM, extra, FA, MM2], [MM, FIA, MM2])
    assert [(p.relation, p.train, p.infer) for p in pairs] == [
        ("same", [0], [0]), ("only_train", [1], []), ("different_impl", [2], [1]), ("same", [3], [2])]


def _layer(kind="fused"):
    body = [NORM, MM, FA, MM2]
    return body + ([ARNB] if kind == "fused" else [ADD, NORM]) + [MM]


def test_layers_by_period_and_an_odd_layer_is_named():
    emb = _k("Gather", "layout", "cast_layout", "151936,1024;1,8", op="GatherV2")
    head = _k("MatMul", "matmul", "linear", "8,1024;1024,151936", op="MatMulV2")
    train = [emb] + sum((_layer("unfused") for _ in range(6)), []) + [NORM, head]
    infer_layers = [_layer("fused") for _ in range(6)]
    infer_layers[4] = _layer("unfused")       # layer 4 falls back to the unfused residual add + norm
    infer = [emb] + sum(infer_layers, []) + [NORM, head]
    al = align_step(train, infer)
    assert al.status == "ok"
    assert [len(al.train.split.layers), len(al.infer.split.layers)] == [6, 6]
    assert al.train.split.layers[0] == (1, 8) and al.train.split.method == "period"
    assert set(al.odd) == {4}, al.odd
    assert "same" in al.odd[4] and "fused" in al.odd[4]
    assert 4 in al.infer.split.odd and al.train.split.odd == {}


# ------------------------------------------------------------------------------ the example capture

@pytest.fixture(scope="module")
def example(tmp_path_factory):
    out = tmp_path_factory.mktemp("example")
    res = run_example(out / "ex", lang="en")
    return out / "ex", res


def test_example_every_layer_aligned_and_every_red_orange_row_has_instances(example):
    out, res = example
    lake = out / "lake"
    rid = res.run_id
    layers = q(lake, "select side, count(layer), min(method), min(confidence) from fct_kernel_layers "
                     "where run_id = $r group by side order by side", r=rid)
    assert [(s, n, m) for s, n, m, _c in layers] == [("infer", 28, "period+call_stack"), ("train", 28, "period+call_stack")]
    assert all(c > 0.9 for *_x, c in layers)
    aligned = q(lake, "select distinct layer from fct_kernel_alignment where run_id = $r order by 1", r=rid)
    assert [x[0] for x in aligned] == list(range(28))
    # every kernel of every layer sits in exactly one group
    per_layer = q(lake, """
        select l.side, l.layer, l.kernel_count,
               (select coalesce(sum(case when l.side = 'train' then a.train_last - a.train_first + 1
                                         else a.infer_last - a.infer_first + 1 end), 0)
                from fct_kernel_alignment a
                where a.run_id = l.run_id and a.layer = l.layer
                  and (case when l.side = 'train' then a.train_first else a.infer_first end) is not null)
        from fct_kernel_layers l where l.run_id = $r""", r=rid)
    assert all(n == m for _s, _l, n, m in per_layer)
    from tilake.reports.op_diff import run_query
    con = connect(lake / "warehouse.duckdb", read_only=True)
    try:
        links = run_query(con, "alignment_links", rid)
    finally:
        con.close()
    assert {r["module"] for r in links} == {"attention", "residual_norm", "rope"}
    assert all(r["layer"] is not None for r in links), links
    got = {(r["module"], r["relation"], r["layer"], r["train_first"], r["train_last"], r["infer_first"],
            r["infer_last"], r["layers_with"]) for r in links}
    assert ("attention", "different_impl", 0, 6, 6, 6, 6, 28) in got
    assert ("residual_norm", "fused", 0, 8, 9, 8, 8, 28) in got     # Add → RmsNorm ↔ AddRmsNormBias
    assert ("residual_norm", "fused", 1, 0, 0, 0, 0, 27) in got     # input norm fused with layer 0's add
    assert ("rope", "split", 0, 4, 5, 4, 4, 28) in got              # RotaryMul ×2 ↔ _triton_rope
    att = next(r for r in links if r["module"] == "attention")
    assert att["train_kernels"] == "FlashAttentionScore" and att["infer_kernels"] == "FusedInferAttentionScore"
    assert att["confirm_boundary"] == "L0.attn_core.out"
    # layer 0 is the only odd layer (vLLM's first layer has no residual to fuse into its input norm)
    odd = q(lake, "select distinct layer from fct_kernel_alignment where run_id = $r and odd_layer", r=rid)
    assert odd == [(0,)]
    md = (out / "train_infer_op_diff_report.md").read_text(encoding="utf-8")
    assert "### 8.2 Layer 0 side by side (odd layer)" in md
    assert "layer 0: Add → RmsNorm (positions 8–9) ↔ AddRmsNormBias (8)" in md
    assert "dump boundary that would confirm it: `L0.attn_core.out`" in md
    html = (out / "train_infer_op_diff_report.html").read_text(encoding="utf-8")
    assert 'id="al-L0-6"' in html and 'href="#al-L0-6"' in html


def _odd_capture(root: Path, job: JobConfig, odd_layer: int) -> None:
    """The example with one inference layer whose post-attention AddRmsNormBias runs unfused."""
    pop = infer_population(job)
    ops = []
    for op in pop.ops:
        k = op.kernels[0] if op.kernels else None
        if k is not None and op.layer == odd_layer and k.op_type == "AddRmsNormBias" and \
                ops and ops[-1].kernels and ops[-1].kernels[0].op_type == "MatMulV2" and \
                sum(1 for o in ops if o.layer == odd_layer) > 3:
            t, h = job.max_prompt_length, job.hidden
            for ot, shapes in (("Add", f"{t},{h};{t},{h}"), ("RmsNorm", f"{t},{h};{h}")):
                ops.append(make_op(ot, shapes, "DT_BF16;DT_BF16", module=op.module, layer=op.layer,
                                   direction=op.direction, phase=op.phase, stack=op.stack))
            continue
        ops.append(op)
    pop.ops = ops
    make_profiler_output(root, seed=0, job=job, infer_pop=pop)


def test_injected_odd_layer_is_named(tmp_path):
    job = JobConfig(layers=8, train_batch_size=1, rollout_n=1, infer_steps=1)
    _odd_capture(tmp_path / "po", job, odd_layer=5)
    lake = Lake(tmp_path / "lake")
    res = run_profile(tmp_path / "po", lake, "odd", tmp_path / "out", run_meta=dict(EXAMPLE_META, rl_config={}), lang="en",
                      progress=False)
    odd = dict(q(lake.root, "select distinct layer, odd_reason from fct_kernel_alignment where run_id = 'odd' "
                            "and odd_layer"))
    assert set(odd) == {0, 5}, odd
    assert "same Add ↔ Add" in odd[5] and "fused Add + RmsNorm ↔ AddRmsNormBias" in odd[5]
    side = q(lake.root, "select layer from fct_kernel_layers where run_id = 'odd' and side = 'infer' and odd")
    assert sorted(x[0] for x in side) == [0, 5]
    rel = q(lake.root, "select relation, train_kernels, train_first, infer_first from fct_kernel_alignment "
                       "where run_id = 'odd' and layer = 5 and infer_kernels = 'Add'")
    assert rel == [("same", "Add", 8, 8)]     # the fallback's Add pairs with the training Add, not with a neighbour
    md = Path(res.report_path).read_text(encoding="utf-8")
    assert "| alignment | 5 | alignment differs" in md and "Layer 5 side by side (odd layer)" in md
    assert "- Odd layers: training 0/8, inference 2/8 layers differ from the side's most common layer; 2/8" in md


# ------------------------------------------------------------------------------ profile ⋈ dump

@pytest.fixture(scope="module")
def joined(tmp_path_factory):
    pytest.importorskip("torch")
    from msprobe_writer import Cfg, dump_infer, dump_train

    from tilake.pipeline.dumps import run_analyze

    tmp = tmp_path_factory.mktemp("join")
    job = JobConfig(layers=4, train_batch_size=1, rollout_n=1, infer_steps=1)
    make_profiler_output(tmp / "po", seed=0, job=job)
    lake = Lake(tmp / "lake")
    meta = dict(EXAMPLE_META, step=0, rl_config={})
    for rid, step in (("same-step", 0), ("other-step", 3)):
        run_profile(tmp / "po", lake, rid, tmp / f"out-{rid}", run_meta=dict(meta, step=step), lang="en", progress=False)
    cfg = Cfg(train_attn="eager")
    tr, inf = dump_train(cfg, tmp / "train"), dump_infer(cfg, tmp / "infer")
    for rid in ("same-step", "other-step"):
        run_analyze(tr, inf, tmp / f"dump-{rid}", card={"model": "Qwen/Qwen3-0.6B"}, lake_path=lake.root, run_id=rid,
                    build=True, charts=False, show_progress=False)
    return tmp, lake


def test_first_divergence_names_its_kernels_and_red_rows_their_boundary(joined):
    tmp, lake = joined
    rows = q(lake.root, "select boundary, join_status, module, comparison_grade, relation, train_kernels, "
                        "infer_kernels, train_first, infer_first from fct_boundary_kernels "
                        "where run_id = 'same-step' and round = 0 and is_first_divergence order by alignment_position")
    assert rows, "no first divergence joined"
    assert {r[0] for r in rows} == {"L0.attn_core.out"} and {r[1] for r in rows} == {"joined"}
    att = [r for r in rows if r[2] == "attention"]
    assert att == [("L0.attn_core.out", "joined", "attention", "red", "different_impl", "FlashAttentionScore",
                    "FusedInferAttentionScore", 6, 6)]
    # RoPE's own boundaries (q/k after RoPE) are bitwise equal in layer 0: it is not blamed for the attention core
    assert {r[2] for r in rows} == {"attention", "kv_cache"}
    own = q(lake.root, "select boundary, status, module from fct_boundary_kernels where run_id = 'same-step' "
                       "and round = 0 and layer = 0 and boundary in ('L0.q_after_rope', 'L0.k_after_rope')")
    assert sorted(set(own)) == [("L0.k_after_rope", "EXACT", "rope"), ("L0.q_after_rope", "EXACT", "rope")]
    # the report: first divergence with kernels, and the red row's boundary with its dump status
    from tilake.pipeline.profile import report_command

    out = report_command(lake, "same-step", tmp / "rep", lang="en")
    md = Path(out["report"]).read_text(encoding="utf-8")
    assert ("First divergence `L0.attn_core.out` (NOT_EXACT" in md
            and "← 🔴 attention: different_impl layer 0: FlashAttentionScore (positions 6) ↔ "
                "FusedInferAttentionScore (6)" in md), md[md.find("## 9"):]
    assert "🔴 attention → dump boundaries that confirm it: `L0.attn_core.out` (NOT_EXACT, independent_point)" in md


def test_join_is_refused_when_the_steps_differ(joined):
    _tmp, lake = joined
    rows = q(lake.root, "select distinct join_status, join_reason, module from fct_boundary_kernels "
                        "where run_id = 'other-step'")
    assert rows == [("refused", "step differs: dump step 0, profile step 3", None)]
