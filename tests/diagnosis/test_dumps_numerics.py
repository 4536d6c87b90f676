"""ULP from bit patterns, exact gate edge cases, classification rules, fused-layout slicing."""
from __future__ import annotations

import math
import sys

import pytest
import torch
from msprobe_mini import write_dump  # noqa: E402

from tilake.diagnosis import analyze as A  # noqa: E402
from tilake.diagnosis import maps as M  # noqa: E402
from tilake.diagnosis.numerics import compare, ordered_bits, tensor_stats, ulp_of  # noqa: E402

F8 = [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]


def next_up(x: torch.Tensor) -> torch.Tensor:
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[x.element_size()]
    return (x.view(bits) + 1).view(x.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32] + F8)
def test_adjacent_values_are_one_ulp_apart(dtype):
    x = torch.tensor([1.0, 1.5, 0.25, -2.0]).to(dtype)
    y = next_up(x)  # one bit step: away from zero for positives, toward... magnitude up for negatives
    d = (ordered_bits(y) - ordered_bits(x)).tolist()
    assert d == [1, 1, 1, -1]
    r = compare(x, y)
    assert r["status"] == "NOT_EXACT" and r["max_elem_ulp"] == 1 and r["mismatch_count"] == 4
    assert r["ulp_hist"]["1"] == 3 and r["ulp_hist"]["-1"] == 1


def test_ulp_across_zero_and_signed_zero():
    z = torch.tensor([0.0, -0.0, 0.0], dtype=torch.bfloat16)
    r = compare(z, torch.tensor([-0.0, 0.0, 0.0], dtype=torch.bfloat16))
    assert r["status"] == "EXACT"  # torch.equal semantics: -0 == +0
    tiny = torch.tensor([1e-40], dtype=torch.float32)  # subnormal
    assert (ordered_bits(tiny) - ordered_bits(-tiny)).item() == 2 * ordered_bits(tiny).item()


def test_ulp_of_native_formats():
    assert ulp_of(1.0, torch.bfloat16) == 2 ** -7
    assert ulp_of(3.0, torch.bfloat16) == 2 ** -6
    assert ulp_of(1.0, torch.float16) == 2 ** -10
    assert ulp_of(1.0, torch.float32) == 2 ** -23
    assert ulp_of(0.0, torch.bfloat16) == 2 ** (-126 - 7)
    if F8:
        assert ulp_of(1.0, torch.float8_e4m3fn) == 2 ** -3


def test_nonfinite_same_place_is_equal_one_sided_is_a_finding():
    a = torch.tensor([1.0, float("nan"), float("inf"), 2.0], dtype=torch.bfloat16)
    assert compare(a, a.clone())["status"] == "EXACT"
    b = a.clone()
    b[3] = float("-inf")
    r = compare(a, b)
    assert r["status"] == "NONFINITE" and r["nonfinite_one_sided"] == 1 and r["nonfinite_both"] == 2
    assert math.isfinite(r["max_abs_diff"]) and math.isfinite(r["ref_absmax"])
    st = tensor_stats(b)
    assert st["nan_count"] == 1 and st["posinf_count"] == 1 and st["neginf_count"] == 1
    assert st["max"] == 1.0 and st["min"] == 1.0 and st["mean"] == 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32] + F8)
def test_tensor_stats_in_float64_for_every_float_dtype(dtype):
    x = torch.tensor([0.5, -1.5, 2.0, 0.25]).to(dtype)
    st = tensor_stats(x)
    assert st["dtype"] == str(dtype) and st["min"] == -1.5 and st["max"] == 2.0
    assert st["mean"] == pytest.approx(0.3125) and st["norm"] == pytest.approx(math.sqrt(0.25 + 2.25 + 4 + 0.0625))
    assert st["nbytes"] == 4 * x.element_size()


def test_dtype_diff_and_float64_stats():
    x = torch.full((1000,), 1.0 + 2 ** -7, dtype=torch.bfloat16)
    assert compare(x, x.float())["status"] == "DTYPE_DIFF"
    st = tensor_stats(x)
    assert st["mean"] == pytest.approx(1.0078125) and st["norm"] == pytest.approx(1.0078125 * math.sqrt(1000))
    assert st["content_hash"] == tensor_stats(x.clone())["content_hash"]
    assert st["content_hash"] != tensor_stats(next_up(x))["content_hash"]


def test_pattern_and_systematic_bias():
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    col = x.clone()
    col[:, 5] = -col[:, 5]
    r = compare(x, col)
    assert r["pattern"] == "whole_columns" and r["cols_differing"] == 1 and r["rows_differing"] == 16
    r = compare(x.abs(), next_up(x.abs()))  # every element 1 ULP up
    assert r["signed_mean_ulp"] == 1.0 and r["pos_count"] == 512 and r["neg_count"] == 0
    row = {"status": "NOT_EXACT", "op": "matmul", "inputs": ["a"], **r}
    A.classify(row, {"a": {"status": "EXACT"}}, {"rounding_max_tensor_ulp": 4})
    # within 1 ULP everywhere but all one direction: a systematic-bias finding, still rounding-level magnitude
    assert row["systematic_bias"] is True and any("systematic bias" in e for e in row["class_evidence"])


def test_elementwise_op_with_equal_inputs_is_logic_level():
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    y = x.clone()
    y[0, 0] = next_up(y[0, :1])[0]
    r = compare(x, y)
    assert r["tensor_ulp"] <= 1
    row = {"status": "NOT_EXACT", "op": "elementwise", "inputs": ["q_norm"], **r}
    A.classify(row, {"q_norm": {"status": "EXACT"}}, {"rounding_max_tensor_ulp": 4})
    assert row["class"] == "logic-level"
    assert any("cannot be accumulation-order noise" in e for e in row["class_evidence"])
    # the same difference behind a differing input is rounding-level (propagated)
    row2 = {"status": "NOT_EXACT", "op": "elementwise", "inputs": ["q_norm"], **r}
    A.classify(row2, {"q_norm": {"status": "NOT_EXACT"}}, {"rounding_max_tensor_ulp": 4})
    assert row2["class"] == "rounding-level" and row2["inputs_equal"] is False


def _megatron_qkv(q, k, v, groups):
    s = q.shape[0]
    qg = q.reshape(s, groups, -1)
    kg = k.reshape(s, groups, -1)
    vg = v.reshape(s, groups, -1)
    return torch.cat([qg, kg, vg], -1).reshape(s, -1)


def test_megatron_per_group_qkv_layout():
    g = torch.Generator().manual_seed(3)
    S, H, KV, d = 5, 4, 2, 8
    q, k, v = (torch.randn(S, n * d, generator=g).to(torch.bfloat16) for n in (H, KV, KV))
    meg = _megatron_qkv(q, k, v, KV)
    dims = {"q_size": H * d, "kv_size": KV * d, "head_dim": d}
    assert torch.equal(M._qkv_split(meg, "per_group", "q", dims), q)
    assert torch.equal(M._qkv_split(meg, "per_group", "k", dims), k)
    assert torch.equal(M._qkv_split(meg, "per_group", "v", dims), v)
    assert not torch.equal(M._qkv_split(meg, "concat", "q", dims), q)


def test_megatron_map_regroups_and_records_the_scan(tmp_path):
    g = torch.Generator().manual_seed(4)
    S, H, KV, d, hid = 6, 4, 2, 8, 32
    q, k, v = (torch.randn(S, n * d, generator=g).to(torch.bfloat16) for n in (H, KV, KV))
    vllm = torch.cat([q, k, v], -1)
    meg = _megatron_qkv(q, k, v, KV).unsqueeze(1)  # [S, B=1, D]
    p = "Module.module.module.decoder.layers.0.self_attention"
    write_dump(tmp_path / "train", [(f"{p}.linear_qkv.ColumnParallelLinear.forward.0", None, {"output": [meg]})])
    vp = "Module.model.layers.0.self_attn"
    write_dump(tmp_path / "infer", [
        (f"{vp}.qkv_proj.QKVParallelLinear.forward.0", None,
         {"output": [vllm], "parameters": {"weight": torch.zeros((H + 2 * KV) * d, hid, dtype=torch.bfloat16)}}),
        (f"{vp}.q_norm.RMSNorm.forward.0", None, {"output": [q.reshape(S, H, d)],
                                                   "parameters": {"weight": torch.ones(d, dtype=torch.bfloat16)}}),
        (f"{vp}.o_proj.RowParallelLinear.forward.0", None,
         {"output": [torch.zeros(S, hid)], "parameters": {"weight": torch.zeros(hid, H * d, dtype=torch.bfloat16)}}),
    ])
    an = A.analyze_pair([A.RoundInput(tmp_path / "train", tmp_path / "infer")], M.load_map("qwen3_megatron_vllm"))
    assert an.dims == {"head_dim": 8, "q_size": 32, "qkv_rows": 64, "kv_size": 16}
    r = {x["boundary"]: x for x in an.boundary_rows}
    assert r["L0.qkv.out"]["status"] == "EXACT"
    scan = [s for s in an.layout_scans if s["boundary"] == "L0.qkv.out"][0]
    assert scan["chosen"] == "per_group" and scan["scores"]["per_group"] == pytest.approx(1.0)
    assert scan["scores"]["concat"] < 0.9
    assert "with Transformer Engine" in r["L0.input_layernorm.out"]["reason"]
    assert r["L0.input_layernorm.out"]["status"] == "evidence_missing"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_dense_chunk_path_gives_the_gathered_path_figures(monkeypatch, dtype):
    """A chunk where most elements differ is measured whole (numerics._dense_chunk); every figure must be
    the one the gathered-positions path gives (forced by DENSE_FRACTION > 1), and the hand-made values hold:
    70 % of the elements moved 1..3 ULP, rows 5 and 9 moved ~50 ULP (logic-level rows)."""
    from tilake.diagnosis import fused
    from tilake.diagnosis import numerics as Nm

    monkeypatch.setattr(fused, "_LIB", False)   # the torch paths (bf16 would take the C kernel)
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(64, 96, generator=g).to(dtype)
    bits = {2: torch.int16, 4: torch.int32}[ref.element_size()]
    step = torch.randint(1, 4, ref.shape, generator=g) * (torch.rand(ref.shape, generator=g) < 0.7)
    step[5] = 50
    step[9, :48] = -50
    other = (ref.view(bits) + step.to(bits)).view(dtype)
    calls = []
    real = Nm._dense_chunk
    monkeypatch.setattr(Nm, "_dense_chunk", lambda *a: calls.append(1) or real(*a))
    dense = compare(ref, other)
    monkeypatch.setattr(Nm, "DENSE_FRACTION", 2.0)
    gathered = compare(ref, other)
    assert calls == [1]          # the first compare took the whole-chunk path, the second did not
    assert dense["mismatch_count"] == int((step != 0).sum()) and dense["mismatch_fraction"] > 0.5
    for k, v in gathered.items():
        if k == "cosine":
            assert dense[k] == pytest.approx(v, rel=1e-12, abs=1e-15)
        else:
            assert dense[k] == v, k
    assert dense["logic_rows"] == [5, 9] and dense["max_elem_ulp"] == 50
    d64 = other.double() - ref.double()
    assert dense["max_abs_diff"] == float(d64.abs().max())
    assert dense["pos_count"] + dense["neg_count"] == dense["mismatch_count"]


@pytest.mark.parametrize("shape,moved", [((64, 96), 0.7), ((4, 8, 300), 0.3), ((5000,), 0.001), ((3, 70000), 0.9),
                                         ((2, 7), 1.0)])
def test_bf16_kernel_gives_the_torch_figures(monkeypatch, shape, moved):
    """The C kernel (diagnosis/fused.py) must give every figure of the torch path on bf16: moved elements
    1..3 ULP (some across zero: sign flips, ±0), rows 1 and 2 moved 40 ULP; cosine equal to 1e-12 (summation
    order). A NaN on one side makes the kernel step aside (the torch path's NONFINITE finding)."""
    from tilake.diagnosis import fused

    if fused.kernel() is None:
        pytest.skip("no C compiler: the torch path is the only path")
    g = torch.Generator().manual_seed(11)
    ref = (torch.randn(shape, generator=g) * torch.rand(shape, generator=g).pow(8)).to(torch.bfloat16)
    ref.view(-1)[:3] = torch.tensor([0.0, -0.0, 1e-30])[:ref.numel()]
    step = torch.randint(-3, 4, shape, generator=g) * (torch.rand(shape, generator=g) < moved)
    if len(shape) >= 2 and shape[0] > 2:
        step[1:3] = 40
    step.view(-1)[:2] = step.view(-1)[:2].abs()   # +0 - 1 ULP and -0 - 1 ULP would be NaN bit patterns
    other = (ref.view(torch.int16) + step.to(torch.int16)).view(torch.bfloat16)
    other = torch.where(other.isnan(), ref, other)   # a tiny value stepped below +0's bits is a NaN pattern
    fast = compare(ref, other)
    monkeypatch.setattr(fused, "_LIB", False)
    slow = compare(ref, other)
    keys = [ordered_bits(t.reshape(-1)) for t in (ref, other)]
    assert fast["mismatch_count"] == int((keys[0] != keys[1]).sum()) > 0
    for k, v in slow.items():
        if k == "cosine":
            assert fast[k] == pytest.approx(v, rel=1e-12, abs=1e-15)
        else:
            assert fast[k] == v, k
    assert fast["status"] == "NOT_EXACT"
    monkeypatch.setattr(fused, "_LIB", None)
    other.view(-1)[-1] = float("nan")
    nf = compare(ref, other)
    assert nf["status"] == "NONFINITE" and nf["nonfinite_one_sided"] == 1


def test_bf16_pearson_kernel_gives_the_torch_value(monkeypatch):
    """The layout scan's Pearson r on bf16 (C kernel, fused.bf16_moments) and the streamed torch value both
    equal an exactly summed (math.fsum, centred) r to 1e-11 (summation order) on a 3 Mi-element pair (more than one torch chunk) with an offset mean; a NaN
    sends it back to the torch path (finite pairs only)."""
    from tilake.diagnosis import fused
    from tilake.diagnosis.localise import pearson

    if fused.kernel() is None:
        pytest.skip("no C compiler: the torch path is the only path")
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(3 << 20, generator=g) + 5.0).to(torch.bfloat16)
    y = (x.float() + 0.3 * torch.randn(3 << 20, generator=g)).to(torch.bfloat16)
    fast = pearson(x, y)
    monkeypatch.setattr(fused, "_LIB", False)
    slow = pearson(x, y)
    ca, cb = x.double() - x.double().mean(), y.double() - y.double().mean()
    exact = math.fsum((ca * cb).tolist()) / math.sqrt(math.fsum((ca * ca).tolist()) * math.fsum((cb * cb).tolist()))
    assert 0.9 < exact < 0.999
    assert fast == pytest.approx(exact, rel=1e-11) and slow == pytest.approx(exact, rel=1e-11)
    y[10] = float("nan")
    slow_nan = pearson(x, y)
    monkeypatch.setattr(fused, "_LIB", None)
    assert pearson(x, y) == slow_nan and slow_nan == pytest.approx(slow, rel=1e-5)


def test_bf16_absmax_kernel():
    """fused.bf16_absmax = torch's max|x| on bf16 (negative largest, subnormals, -0); None on NaN/inf."""
    from tilake.diagnosis import fused

    if fused.kernel() is None:
        pytest.skip("no C compiler: the torch path is the only path")
    x = torch.tensor([0.5, -3.25, -0.0, 1e-40, 2.0], dtype=torch.bfloat16)
    assert fused.bf16_absmax(x) == float(x.abs().max()) == 3.25
    assert fused.bf16_absmax(torch.tensor([-0.0, 1e-40], dtype=torch.bfloat16)) == float(torch.tensor(1e-40, dtype=torch.bfloat16))
    for bad in (float("nan"), float("inf"), -float("inf")):
        assert fused.bf16_absmax(torch.tensor([1.0, bad], dtype=torch.bfloat16)) is None
    ref = torch.tensor([[1.0, float("nan")], [2.0, -4.0]], dtype=torch.bfloat16)
    r = compare(ref, ref.clone())   # EXACT path: NaN at the same place is equal, absmax over finite values
    assert r["status"] == "EXACT" and r["ref_absmax"] == 4.0 and r["nonfinite_both"] == 1


def test_bf16_equal_absmax_kernel(monkeypatch):
    """fused.bf16_equal_absmax: one read of each side gives the EXACT gate and max|ref|; compare() then
    returns what the torch path returns (equality by bits, absmax exact), for equal and differing pairs."""
    from tilake.diagnosis import fused

    if fused.kernel() is None:
        pytest.skip("no C compiler: the torch path runs (tested above)")
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5000, 64, generator=g).to(torch.bfloat16).reshape(-1)
    y = x.clone()
    assert fused.bf16_equal_absmax(x, y) == (True, float(x.abs().max()))
    y[-1] = -y[-1] - 1
    assert fused.bf16_equal_absmax(x, y) == (False, None)          # the last block differs
    z = torch.tensor([-0.0, 1.0], dtype=torch.bfloat16)
    assert fused.bf16_equal_absmax(z, torch.tensor([0.0, 1.0], dtype=torch.bfloat16)) == (False, None)  # bits
    nan = torch.tensor([1.0, float("nan")], dtype=torch.bfloat16)
    assert fused.bf16_equal_absmax(nan, nan.clone()) is None        # equal but non-finite: torch path counts
    ref, other = x.reshape(5000, 64), x.reshape(5000, 64).clone()
    other[17, 5] = -other[17, 5] - 1
    got = [compare(ref, ref.clone()), compare(ref, other), compare(nan, nan.clone())]
    monkeypatch.setattr(fused, "_LIB", False)
    want = [compare(ref, ref.clone()), compare(ref, other), compare(nan, nan.clone())]
    monkeypatch.setattr(fused, "_LIB", None)
    assert got[0]["status"] == "EXACT" and got[0]["ref_absmax"] == float(x.abs().max())
    assert got[1]["status"] == "NOT_EXACT" and got[1]["mismatch_count"] == 1 and got[1]["logic_rows"] == [17]
    assert got[2]["status"] == "EXACT" and got[2]["nonfinite_both"] == 1
    for g_, w_ in zip(got, want):
        assert set(g_) == set(w_)
        for k in g_:
            if k == "cosine" and g_[k] is not None:
                assert g_[k] == pytest.approx(w_[k], rel=1e-12)
            else:
                assert g_[k] == w_[k], k


def test_fused_kernel_cache_rebuilt_and_fallbacks(tmp_path):
    """A cached kernel object that does not load (cut short) is rebuilt once; no compiler or an unwritable
    cache folder means the torch path (kernel() is None), never an error. Separate processes: a loaded
    shared object must not be overwritten under the process that mapped it."""
    import subprocess

    from tilake.diagnosis import fused

    if fused.kernel() is None:
        pytest.skip("no C compiler here")
    probe = "from tilake.diagnosis import fused; print(fused.kernel() is not None)"
    env = {**__import__("os").environ, "TILAKE_CACHE": str(tmp_path / "c")}
    run = lambda e: subprocess.run([sys.executable, "-c", probe], env=e, capture_output=True, text=True).stdout.strip()  # noqa: E731
    assert run(env) == "True"
    (so,) = list((tmp_path / "c").glob("fused_*.so"))
    so.write_bytes(b"cut short")
    assert run(env) == "True" and so.stat().st_size > 1000
    assert run({**env, "CC": "/bin/false", "TILAKE_CACHE": str(tmp_path / "d")}) == "False"
    assert run({**env, "TILAKE_CACHE": "/proc/tilake-no-such/cache"}) == "False"
    assert run({**env, "TILAKE_FUSED": "0"}) == "False"
