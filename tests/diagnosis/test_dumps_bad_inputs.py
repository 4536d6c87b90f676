"""Bad inputs: each gives one clear line or a status row, never a traceback, and the analysis continues."""
from __future__ import annotations

import json

import msprobe_writer as G  # noqa: E402
import pytest
import torch
from click.testing import CliRunner
from msprobe_mini import write_dump, write_map  # noqa: E402

from tilake.cli import main  # noqa: E402
from tilake.diagnosis import analyze as A  # noqa: E402
from tilake.diagnosis import maps as M  # noqa: E402
from tilake.diagnosis.lake_rows import stats_rows  # noqa: E402
from tilake.errors import TilakeError  # noqa: E402
from tilake.ingest.msprobe.reader import DumpSide, load_pt  # noqa: E402


def sel(mod, io="output", index=0, **kw):
    return {"module": mod, "io": io, "index": index, **kw}


def bnd(name, tr, inf, op="matmul", inputs=()):
    return {"name": name, "op": op, "inputs": list(inputs), "train": tr, "infer": inf}


@pytest.fixture()
def mini(tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    packed = torch.randn(1, 13, 64, generator=g).to(torch.bfloat16)
    padded = torch.zeros(2, 8, 64, dtype=torch.bfloat16)
    padded[0, :5] = packed[0, :5]
    padded[1, :8] = packed[0, 5:13]
    padded[0, 5:] = 7.0  # padding garbage
    mask = torch.zeros(2, 8, dtype=torch.int64)
    mask[0, :5] = 1
    mask[1, :8] = 1
    write_dump(tmp_path / "train", [
        ("Module.m.A.Lin.forward.0", None, {"output": [x.unsqueeze(0)]}),
        ("Module.m.Z.Lin.forward.0", None, {"output": [torch.tensor(3.0, dtype=torch.bfloat16)]}),
        ("Module.m.M.Lin.forward.0", None, {"output": [x]}),
        ("Module.m.T.Lin.forward.0", None, {"output": [x]}),
        ("Module.m.P.Lin.forward.0", None, {"output": [packed]}),
        ("Module.m.B.Lin.forward.0", None, {"output": [x]}),
    ])
    infer = write_dump(tmp_path / "infer", [
        ("Module.m.A.Lin.forward.0", None, {"output": [x]}),
        ("Module.m.Z.Lin.forward.0", None, {"output": [x]}),
        ("Module.m.M.Lin.forward.0", None, {"output": [x]}),
        ("Module.m.T.Lin.forward.0", None, {"output": [x]}),
        ("Module.m.P.Lin.forward.0", None, {"input": [mask], "output": [padded]}),
        ("Module.m.B.Lin.forward.0", None, {"output": [x]}),
    ])
    (infer / "dump_tensor_data" / "Module.m.M.Lin.forward.0.output.0.pt").unlink()
    t = infer / "dump_tensor_data" / "Module.m.T.Lin.forward.0.output.0.pt"
    t.write_bytes(t.read_bytes()[:200])
    bmap = write_map(tmp_path / "mini.yaml", [
        bnd("batch_dim", sel("m.A.Lin"), sel("m.A.Lin")),
        bnd("zero_d", sel("m.Z.Lin"), sel("m.Z.Lin")),
        bnd("missing_pt", sel("m.M.Lin"), sel("m.M.Lin")),
        bnd("truncated_pt", sel("m.T.Lin"), sel("m.T.Lin")),
        bnd("padded_no_unpad", sel("m.P.Lin"), sel("m.P.Lin")),
        bnd("padded_cu", sel("m.P.Lin", transforms=[{"squeeze": 0}]), sel("m.P.Lin", transforms=[{"unpad": None}])),
        bnd("padded_mask", sel("m.P.Lin", transforms=[{"squeeze": 0}]),
            sel("m.P.Lin", transforms=[{"unpad": {"mask": sel("m.P.Lin", io="input", index=0)}}])),
        bnd("after", sel("m.B.Lin"), sel("m.B.Lin")),
        bnd("absent", sel("m.Q.Lin"), sel("m.B.Lin")),
    ])
    return tmp_path, bmap


def test_bad_boundaries_become_rows_and_analysis_continues(mini):
    tmp, mp = mini
    an = A.analyze_pair([A.RoundInput(tmp / "train", tmp / "infer")], M.load_map(str(mp)))
    r = {x["boundary"]: x for x in an.boundary_rows}
    assert r["batch_dim"]["status"] == "EXACT"
    assert any("unified" in n and "[1, 8, 64] vs [8, 64]" in n for n in r["batch_dim"]["notes"])
    assert r["zero_d"]["status"] == "SHAPE_DIFF" and "[] (train) vs [8, 64] (infer)" in r["zero_d"]["reason"]
    assert r["missing_pt"]["status"] == "MISSING"
    assert "Module.m.M.Lin.forward.0.output.0.pt" in r["missing_pt"]["reason"]
    assert "missing" in r["missing_pt"]["reason"]
    assert r["truncated_pt"]["status"] == "MISSING" and "truncated or corrupt" in r["truncated_pt"]["reason"]
    assert r["padded_no_unpad"]["status"] == "evidence_missing"
    assert "refusing to compare padded tensors" in r["padded_no_unpad"]["reason"]
    # unpad needs cu_seqlens or a mask: without the pairing's cu_seqlens it refuses
    assert r["padded_cu"]["status"] == "evidence_missing" and "no attention mask or cu_seqlens" in r["padded_cu"]["reason"]
    assert r["padded_mask"]["status"] == "EXACT"
    assert any("unpad with attention mask: [2, 8, 64]→[13, 64]" in n for n in r["padded_mask"]["notes"])
    assert r["after"]["status"] == "EXACT"
    assert r["absent"]["status"] == "evidence_missing" and "train dump has no entry Module.m.Q.Lin" in r["absent"]["reason"]
    fd = an.rounds[0]["first_divergence"]
    assert fd["status"] == "found" and fd["boundary"] == "zero_d"
    assert an.verdict == "evidence_missing" and "SHAPE_DIFF: zero_d" in an.verdict_reason


def test_uncompared_predecessor_blocks_naming_the_first_divergence(mini):
    tmp, _ = mini
    mp = write_map(tmp / "order.yaml", [bnd("missing_pt", sel("m.M.Lin"), sel("m.M.Lin")),
                                        bnd("differs", sel("m.P.Lin", transforms=[{"squeeze": 0}, {"slice_first": [0, 8]}]),
                                            sel("m.P.Lin", transforms=[{"select_row": 0}]))])
    an = A.analyze_pair([A.RoundInput(tmp / "train", tmp / "infer")], M.load_map(str(mp)))
    fd = an.rounds[0]["first_divergence"]
    assert fd["status"] == "undetermined" and fd["boundary"] is None
    assert fd["uncompared_predecessors"] == ["missing_pt"]
    assert "cannot be named the first divergence" in fd["reason"] and fd["first_non_exact"] == "differs"
    row = next(r for r in an.boundary_rows if r["boundary"] == "differs")
    assert row["status"] == "NOT_EXACT" and row["rows_differing"] == 3 and row["pattern"] == "whole_rows"
    # a boundary without declared inputs that differs in whole rows is still a logic-level point
    assert row["class"] == "logic-level" and an.verdict == "nonzero"


def test_cu_seqlens_pairing_unpads(mini):
    tmp, mp = mini
    an = A.analyze_pair([A.RoundInput(tmp / "train", tmp / "infer")], M.load_map(str(mp)),
                        pairing={"cu_seqlens": [0, 5, 13]})
    r = {x["boundary"]: x for x in an.boundary_rows}
    assert r["padded_cu"]["status"] == "EXACT"
    assert any("cu_seqlens" in n and "[13, 64]" in n for n in r["padded_cu"]["notes"])


def test_tensor_stats_rows_for_missing_and_truncated(mini):
    tmp, _ = mini
    rows = stats_rows(DumpSide(tmp / "infer", "infer"), "infer", 0)
    st = {r["entry"]: r for r in rows if r["io_kind"] == "output"}
    assert st["Module.m.M.Lin.forward.0"]["status"] == "missing"
    assert st["Module.m.T.Lin.forward.0"]["status"] == "unreadable"
    ok = st["Module.m.A.Lin.forward.0"]
    assert ok["status"] == "ok" and ok["dtype"] == "torch.bfloat16" and ok["shape"] == [8, 64] and ok["nan_count"] == 0


def test_one_side_dumped_nothing_fails_fast(tmp_path):
    write_dump(tmp_path / "train", [("Module.m.A.Lin.forward.0", None, {"output": [torch.ones(2)]})])
    d = tmp_path / "infer" / "step0" / "rank0"
    d.mkdir(parents=True)
    (d / "dump.json").write_text(json.dumps({"task": "tensor", "level": "mix", "data": {}}))
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(tmp_path / "train"), "--infer",
                                  str(tmp_path / "infer"), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2
    assert "infer side has 0 entries" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_several_proc_folders_are_ambiguous(tmp_path):
    for pid in ("proc111", "proc222"):
        write_dump(tmp_path / "d", [("Module.m.A.Lin.forward.0", None, {"output": [torch.ones(2)]})],
                   folder=f"step0/{pid}")
    with pytest.raises(TilakeError, match="2 rank/proc folders in one step .*ambiguous"):
        DumpSide(tmp_path / "d")
    # the single folder itself is accepted
    assert DumpSide(tmp_path / "d" / "step0" / "proc111").proc == "proc111"


def test_unsafe_pickle_is_refused(tmp_path):
    p = tmp_path / "evil.pt"
    torch.save({"x": torch.ones(2), "f": G.Cfg()}, str(p))
    with pytest.raises(TilakeError, match="refused: the .pt needs more than plain tensors.*weights_only"):
        load_pt(p)
    q = tmp_path / "notensor.pt"
    torch.save([1, 2], str(q))
    with pytest.raises(TilakeError, match="holds a list, not a tensor"):
        load_pt(q)


def test_dump_json_out_of_order_uses_construct_order(tmp_path):
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    G.dump_infer(cfg, tmp_path / "infer", "weight_row", w=w, shuffle_dump_json=True)
    side = DumpSide(tmp_path / "infer", "infer")
    assert any("out of execution order" in x for x in side.warnings)
    an = A.analyze_pair([A.RoundInput(tmp_path / "train", tmp_path / "infer")], M.load_map("qwen3_hf_vllm"))
    assert an.rounds[0]["first_divergence"]["boundary"] == "L1.gate_proj.out"
    assert any("out of execution order" in n for n in an.notes)
    # the reversed dump.json still yields slots in call order
    orders = [s.exec_order for s in side.slots]
    assert orders == sorted(orders)


def test_dtype_in_file_differs_from_dump_json(tmp_path):
    t = torch.ones(4, dtype=torch.float16)
    d = write_dump(tmp_path / "d", [("Module.m.A.Lin.forward.0", None, {"output": [t]})],
                   declared_dtypes={"Module.m.A.Lin.forward.0.output.0.pt": "torch.bfloat16"})
    rows = stats_rows(DumpSide(d), "train", 0)
    assert rows[0]["dtype"] == "torch.float16" and rows[0]["dtype_mismatch"] is True
    write_dump(tmp_path / "o", [("Module.m.A.Lin.forward.0", None, {"output": [t]})])
    mp = write_map(tmp_path / "m.yaml", [bnd("a", sel("m.A.Lin"), sel("m.A.Lin"))])
    an = A.analyze_pair([A.RoundInput(d, tmp_path / "o")], M.load_map(str(mp)))
    assert an.boundary_rows[0]["status"] == "EXACT"
    assert any("dump.json says torch.bfloat16" in n and "the file holds torch.float16" in n
               for n in an.boundary_rows[0]["notes"])
    assert "dump.json says torch.bfloat16, the file holds torch.float16" in rows[0]["reason"]


@pytest.mark.parametrize("variant", ["8.x", "megatron", "none"])
def test_construct_variants(tmp_path, variant):
    d = write_dump(tmp_path / "d", [("Module.m.Top.forward.0", None, {"output": [torch.ones(2)]}),
                                    ("Tensor.__add__.3.forward", "Module.m.Top.forward.0", {"output": [torch.ones(2)]})],
                   construct=variant, dump_order=["Tensor.__add__.3.forward", "Module.m.Top.forward.0"])
    side = DumpSide(d)
    if variant == "none":
        assert side.children("Module.m.Top.forward.0") == []
        assert any("construct.json absent" in w for w in side.warnings)
    else:
        assert side.children("Module.m.Top.forward.0") == ["Tensor.__add__.3.forward"]
        assert side.parents["Module.m.Top.forward.0"] is None
        assert side.construct_variant == variant
        assert side.warnings == []  # completion order (child before parent) is not "out of order"


def test_request_rows_cut_from_a_batched_inference_tensor(tmp_path):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(8, 16, generator=g).to(torch.bfloat16)
    batch = torch.randn(20, 16, generator=g).to(torch.bfloat16)
    batch[6:14] = x
    b3 = torch.randn(3, 8, 16, generator=g).to(torch.bfloat16)
    b3[2] = x
    write_dump(tmp_path / "train", [("Module.m.A.Lin.forward.0", None, {"output": [x.unsqueeze(0)]})])
    write_dump(tmp_path / "infer", [("Module.m.A.Lin.forward.0", None, {"output": [batch]}),
                                    ("Module.m.B.Lin.forward.0", None, {"output": [b3]})])
    mp = write_map(tmp_path / "m.yaml", [bnd("tok", sel("m.A.Lin"), sel("m.A.Lin")),
                                         bnd("row", sel("m.A.Lin"), sel("m.B.Lin"))])
    bm = M.load_map(str(mp))
    an = A.analyze_pair([A.RoundInput(tmp_path / "train", tmp_path / "infer")], bm)
    # without the pairing: token rows differ (SHAPE_DIFF); a batch vs one request is refused like padding
    assert [r["status"] for r in an.boundary_rows] == ["SHAPE_DIFF", "evidence_missing"]
    an = A.analyze_pair([A.RoundInput(tmp_path / "train", tmp_path / "infer")], bm,
                        pairing={"request_tokens": [6, 14], "request_index": 2})
    r = {x["boundary"]: x for x in an.boundary_rows}
    assert r["tok"]["status"] == "EXACT" and "infer: request tokens [6:14] of [20, 16]" in r["tok"]["notes"]
    assert r["row"]["status"] == "EXACT" and "infer: request row 2 of batch [3, 8, 16]" in r["row"]["notes"]


def test_pt_written_on_an_npu_host_loads_on_cpu(tmp_path, monkeypatch):
    """A tensor saved on an NPU host is tagged with location 'npu:0'; map_location='cpu' reads it here."""
    import torch.serialization as ser

    p = tmp_path / "npu.pt"
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch.bfloat16)
    real = ser.location_tag
    monkeypatch.setattr(ser, "location_tag", lambda storage: "npu:0")
    torch.save(t, str(p))
    monkeypatch.setattr(ser, "location_tag", real)
    assert b"npu:0" in p.read_bytes()
    got = load_pt(p)
    assert got.device.type == "cpu" and got.dtype == torch.bfloat16 and torch.equal(got, t)


def test_legacy_non_zip_pt_loads_without_mmap(tmp_path):
    p = tmp_path / "legacy.pt"
    t = torch.ones(3, dtype=torch.float16)
    torch.save(t, str(p), _use_new_zipfile_serialization=False)
    assert torch.equal(load_pt(p), t)


def test_statistics_only_dump_is_evidence_missing(tmp_path):
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    d = G.dump_infer(cfg, tmp_path / "infer", None, w=w)
    # turn the inference side into a statistics dump: no data_name, no tensor files
    dj = json.loads((d / "dump.json").read_text())
    dj["task"] = "statistics"
    dj["dump_data_dir"] = None

    def strip(v):
        if isinstance(v, dict):
            v.pop("data_name", None)
            for x in v.values():
                strip(x)
        elif isinstance(v, list):
            for x in v:
                strip(x)

    strip(dj["data"])
    (d / "dump.json").write_text(json.dumps(dj))
    an = A.analyze_pair([A.RoundInput(tmp_path / "train", tmp_path / "infer")], M.load_map("qwen3_hf_vllm"))
    # statistics are used but can never prove EXACT: every boundary stays evidence_missing, saying why
    assert {r["status"] for r in an.boundary_rows} == {"evidence_missing"}
    assert "statistics equal (Max/Min equal, Mean/Norm within the float32 reduction tolerance) — statistics cannot " \
           "prove EXACT" in an.boundary_rows[0]["reason"]
    assert any("the map's selector needs one (qkv_part)" in r["reason"] for r in an.boundary_rows)
    assert an.verdict == "evidence_missing" and "no boundary could be compared" in an.verdict_reason
    rows = stats_rows(DumpSide(tmp_path / "infer"), "infer", 0)
    assert {r["status"] for r in rows} == {"msprobe_summary"}   # the statistics dump.json still holds
    # ... and each summary row carries the writer's own Max/Norm of its slot (None stays NULL: the
    # writer gives int token ids no Mean/Norm, as msprobe does)
    slots = DumpSide(tmp_path / "infer").slots
    assert [(r["max"], r["norm"]) for r in rows] == [(s.declared_stats["Max"], s.declared_stats["Norm"]) for s in slots]
    assert rows[0]["norm"] is None and rows[0]["declared_dtype"] == "torch.int64"
    assert rows[0]["max"] == float(G.prompt(cfg).max()) == 111.0   # the largest token id fed


def test_bad_map_and_bad_out_folder_are_one_line_errors(mini, tmp_path):
    tmp, _ = mini
    bad = write_map(tmp / "bad.yaml", [{"name": "x", "train": {"module": "m.A.Lin"}}])
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(tmp / "train"), "--infer", str(tmp / "infer"),
                                  "--map", str(bad), "--out", str(tmp / "o")])
    assert r.exit_code == 2 and "boundaries[0] (x) has no 'infer' selector" in r.output
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(tmp / "train"), "--infer", str(tmp / "infer"),
                                  "--map", "no_such_map", "--out", str(tmp / "o")])
    assert r.exit_code == 2 and "(shipped maps: hf_vllm, llama2_megatron_legacy, qwen3_hf_vllm, qwen3_megatron_vllm)" in r.output
    f = tmp_path / "afile"
    f.write_text("x")
    good = write_map(tmp / "good.yaml", [bnd("b", sel("m.B.Lin"), sel("m.B.Lin"))])
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(tmp / "train"), "--infer", str(tmp / "infer"),
                                  "--map", str(good), "--out", str(f / "sub"), "--no-charts"])
    assert r.exit_code == 2 and "cannot create the output folder" in r.output and "Traceback" not in r.output
