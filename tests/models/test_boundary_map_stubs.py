"""Every boundary of every shipped map (``models/*.yaml``) that feeds another boundary has a stub target, or
the map says in ``stub_none`` why no module input carries it (issue 11 item 7). Checked for 1–3 layers, so
the next-layer placeholder ``{n}`` and the last layer's ``stub_last`` are both exercised."""
from __future__ import annotations

import re

import pytest

from tilake.models.boundary_maps import expand, list_maps, load_map

MAPS = [p.stem for p in list_maps()]
SELECTOR_KEYS = {"module", "api", "sum", "concat_last"}


def test_the_shipped_maps_are_the_four_known():
    assert MAPS == ["hf_vllm", "llama2_megatron_legacy", "qwen3_hf_vllm", "qwen3_megatron_vllm"]


@pytest.mark.parametrize("name", MAPS)
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_every_consumed_boundary_has_a_stub_target(name, layers):
    bs = expand(load_map(name), layers)
    consumed = {n for b in bs for n in b.inputs}
    lacking = [b.name for b in bs if b.name in consumed and not b.stub and not b.stub_none]
    assert lacking == [], f"{name}: boundaries without a stub target: {lacking}"
    for b in bs:
        for side, spec in b.stub.items():
            specs = spec if isinstance(spec, list) else [spec]
            for sp in specs:
                assert sp.get("module") and sp.get("inputs"), (name, b.name, side)
                # a stub never names a layer the model does not have ({n} on the last layer → stub_last)
                assert all(int(i) < layers for i in re.findall(r"layers\.(\d+)\.", sp["module"])), (b.name, sp["module"])
                for idx, sel in sp["inputs"].items():
                    assert str(idx).isdigit() and SELECTOR_KEYS & set(sel), (name, b.name, idx)


@pytest.mark.parametrize("name,terminal,none", [
    ("qwen3_hf_vllm", ["logits"], []),
    ("hf_vllm", ["logits"], [f"L{i}.{b}" for i in (0, 1) for b in ("q_proj.out", "k_proj.out", "q_norm.out",
                                                                    "k_norm.out", "attn_residual.out")]),
    ("qwen3_megatron_vllm", ["logits"], []),
    ("llama2_megatron_legacy", ["final_norm.out"], ["L0.attn_dense.out", "L1.attn_dense.out"]),
])
def test_only_the_model_output_and_declared_exceptions_go_without_a_stub(name, terminal, none):
    bs = expand(load_map(name), 2)
    assert [b.name for b in bs if not b.stub and not b.stub_none] == terminal
    assert [b.name for b in bs if b.stub_none] == none
    consumed = {n for b in bs for n in b.inputs}
    assert not set(terminal) & consumed


def test_next_layer_placeholder_and_last_layer_stub():
    bs = {b.name: b for b in expand(load_map("qwen3_hf_vllm"), 2)}
    assert bs["L0.down_proj.out"].stub["infer"]["module"] == "model.layers.1.input_layernorm.RMSNorm"
    assert bs["L1.down_proj.out"].stub["infer"]["module"] == "model.norm.RMSNorm"
    assert bs["L0.layer.out"].stub["train"]["module"] == "model.layers.1.Qwen3DecoderLayer"
    assert bs["L1.layer.out"].stub["train"]["module"] == "model.norm.Qwen3RMSNorm"
    assert bs["L1.layer.out"].stub["train"]["inputs"]["0"]["sum"][0]["module"] == "model.layers.1.Qwen3DecoderLayer"
