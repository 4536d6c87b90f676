"""Layers that match the model (diagnosis/kernel_layers.py): the trace's own module boundaries before any
period, and a layer count that contradicts the model's rejected, not reported.

Module boundaries copy the real traces: ``FSDP::pre_forward (model.layers.0)`` / ``FSDP::post_forward
(model.layers.0)`` user annotations of the real verl 0.9.1 FSDP2 training trace (``shared/verl-cpu/traces``) and
``nn.Module: Qwen2DecoderLayer_<n>`` module frames of the real HF Qwen1.5 H100 trace
(``shared/fixtures/real_gpu_traces/nv_h100_hf_qwen15_05b``).
"""
from __future__ import annotations

from tilake.diagnosis.kernel_align import align_step
from tilake.diagnosis.kernel_layers import (
    Kernel,
    check_model_layers,
    layer_index_of,
    module_layers,
    range_layer_intervals,
    split_layers,
)


def _k(base, mod="elementwise", cat="elementwise", layer=None, frames=()):
    return Kernel(pos=0, name=base, op_type=base, base=base, category=cat, module=mod, layer_module=layer,
                  frames=tuple(frames))


def _tiny_pattern(n):
    """A forward whose kernels repeat every 2 (copy, fill): a period split finds n // 2 'layers'."""
    return [_k("Copy" if i % 2 else "Fill") for i in range(n)]


def test_a_period_split_that_contradicts_the_model_is_rejected_with_the_reason():
    ks = _tiny_pattern(40)
    split = split_layers(ks)
    assert len(split.layers) == 20 and split.method == "period"       # what the report used to show
    out = check_model_layers(split, ks, (7, "HF config /m/config.json (num_hidden_layers)"))
    assert out.layers == [] and out.method == "none"
    assert out.note == ("20 layers by method period contradict the model's 7 "
                        "(HF config /m/config.json (num_hidden_layers)): rejected")
    assert check_model_layers(split, ks, None) is split                 # model unknown: kept as it is
    assert check_model_layers(split, ks, (20, "x")) is split            # the model's count: kept


def _layer():
    return [_k("Pow"), _k("Rsqrt"), _k("Mul"), _k("MatMul", "linear", "matmul"),
            _k("Attention", "attention", "attention"), _k("MatMul", "linear", "matmul"), _k("Add"),
            _k("Swish", "activation", "activation"), _k("MatMul", "linear", "matmul")]


def test_with_the_models_count_the_period_repeating_that_many_times_splits_the_forward():
    head = [_k("Embedding", "embedding", "embedding"), _k("Copy"), _k("Copy"), _k("Copy"), _k("Copy")]
    tail = [_k(f"Sample{i}", "sampling", "sampling") for i in range(30)]   # the rollout's sampler: no repeat
    ks = head + _layer() + _layer() + tail
    split = split_layers(ks)
    assert split.layers == [] and "no period" in split.note           # the period alone finds nothing
    out = check_model_layers(split, ks, (2, "launch script: override +actor_rollout_ref.model.override_config."
                                            "num_hidden_layers"))
    assert out.method == "period+model_layers" and out.layers == [(5, 14), (14, 23)]
    # a run of repeated copies is no layer (too few distinct kernels)
    copies = [_k("Copy")] * 30
    assert check_model_layers(split_layers(copies), copies, (3, "x")).layers == []


def test_module_boundaries_give_the_layers_and_no_period_overrides_them():
    ks = [_k("Embedding", "embedding", "embedding")] + [_k("Copy")] * 4
    for li in range(2):
        ks += [_k(k.base, k.module, k.category, layer=li) for k in _layer()] + [_k("Copy")] * 3
    split = module_layers(ks, "FSDP::pre_forward … FSDP::post_forward (…layers.N) ranges")
    assert split.method == "module_boundary" and split.layers == [(5, 14), (17, 26)] and split.confidence == 1.0
    assert check_model_layers(split, ks, (2, "x")) is split
    rejected = check_model_layers(split, ks, (3, "HF config c.json (num_hidden_layers)"))
    assert rejected.layers == [] and "2 layers by method module_boundary contradict the model's 3" in rejected.note
    al = align_step(ks, ks)
    assert al.train.split.method == "module_boundary" and len(al.pairs) == 2


def test_fsdp_ranges_and_module_frames_name_the_layer():
    ranges = [("FSDP::pre_forward (model.layers.0)", 100, 110), ("FSDP::post_forward (model.layers.0)", 200, 205),
              ("FSDP::pre_forward (model.layers.1)", 210, 220), ("FSDP::post_forward (model.layers.1)", 300, 301),
              ("FSDP::pre_forward", 90, 95), ("FSDP::pre_backward (model.layers.1)", 400, 410),
              ("FSDP::pre_forward (model.layers.0)", 500, 510), ("FSDP::post_forward (model.layers.0)", 600, 605)]
    assert range_layer_intervals(ranges) == [(110, 200, 0), (220, 300, 1), (510, 600, 0)]
    assert layer_index_of(("modeling_qwen2.py(150): forward", "nn.Module: Qwen2Attention_3",
                           "nn.Module: Qwen2DecoderLayer_3", "nn.Module: Qwen2Model_0")) == 3
    assert layer_index_of(("nn.Module: TransformerBlock_35",)) == 35
    assert layer_index_of(("nn.Module: Qwen2RMSNorm_7",)) is None
