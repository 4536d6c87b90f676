"""The stubs added for every boundary of the shipped maps take effect on generated dumps
(tests/fixtures/msprobe_writer.py): msprobe ``load`` on the target side replaces the consuming module's
input(s) with the other side's tensor, bitwise, checked on the next round's dump by ``verify_stub``.
Layer 1 is the last layer of the 2-layer generator, so ``stub_last`` (final norm) is exercised too."""
from __future__ import annotations

import msprobe_writer as G
import pytest

from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    root = tmp_path_factory.mktemp("stubgen")
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, root / "hf", w)
    G.dump_megatron(cfg, root / "meg", w)
    G.dump_infer(cfg, root / "infer", "attn_scale", w=w)
    return cfg, w, root


def _redump(cfg, w, side_kind, root, load):
    """Dump the stub's target side again with msprobe-style ``load``."""
    if side_kind == "infer":
        return G.dump_infer(cfg, root, "attn_scale", load=load, w=w)
    build = G.build_train if side_kind == "hf" else G.build_megatron
    return G.run_dumped(build(cfg, w), root, lambda m: m(G.prompt(cfg)[None]), load=load)


CASES = [("qwen3_hf_vllm", "hf", b) for b in ("L0.down_proj.out", "L1.down_proj.out", "L0.layer.out", "L1.layer.out")] + [
    ("qwen3_megatron_vllm", "meg", b) for b in (
        "embed", "L0.input_layernorm.out", "L0.qkv.out", "L0.q_norm.out", "L0.k_norm.out", "L0.attn_core.out",
        "L0.o_proj.out", "L0.post_attention_layernorm.out", "L0.gate_up.out", "L0.act_mul.out", "L0.down_proj.out",
        "L1.down_proj.out", "L0.layer.out", "L1.layer.out", "final_norm.out")]


@pytest.mark.parametrize("map_name,train,boundary", CASES)
def test_stub_takes_effect(gen, tmp_path, map_name, train, boundary):
    cfg, w, root = gen
    bmap = M.load_map(map_name)
    pair = A.Pair(root / train, root / "infer", bmap)
    instr = A.stub_instruction(pair, [], {"boundary": boundary}, 0, None)
    assert instr["available"] is True and not instr.get("warnings"), instr
    files = A.prepare_stub_source(pair, instr, tmp_path / "src")
    assert files and all(f.is_file() for f in files)
    load = {"path": str(tmp_path / "src"), "modules": instr["msprobe_config"]["load"]["modules"]}
    target = instr["target_side"]
    again = _redump(cfg, w, "infer" if target == "infer" else train, tmp_path / "r1", load)
    pk = A.Pair(root / train, again, bmap) if target == "infer" else A.Pair(again, root / "infer", bmap)
    ver = A.verify_stub(pk, instr)
    assert ver["effective"] is True, ver
    # the qkv stub feeds three vLLM modules (q_norm, k_norm, the attention's v)
    if boundary == "L0.qkv.out":
        assert len(instr["modules"]) == 3 and len(ver["checks"]) == 3
    if boundary.endswith("layer.out"):
        assert target == "train"     # no vLLM module receives the residual sum
