"""msprobe's own statistics and md5 in the lake (issue 11 item 14), read back through ``tilake.open_lake``.

Real files only: ``shared/fixtures/real_public/dump_llama2_md5/{npu,bench}`` (Megatron-legacy Llama2,
``task: statistics`` with ``md5``, no ``.pt``) and ``dump_lm_compare_statistics/pt`` (Megatron-core via
MindSpeed-LLM, ``task: statistics``: data_name given, no ``.pt`` written). Expected values are copied
from those dump.json files.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from msprobe_mini import write_map  # noqa: E402

from tilake.api import open_lake  # noqa: E402
from tilake.cli import main  # noqa: E402

REAL = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "real_public"
LLAMA = REAL / "dump_llama2_md5"
MINDSPEED = REAL / "dump_lm_compare_statistics" / "pt"

EMB = "Module.module.module.language_model.embedding.Embedding.forward.0"
DENSE = "Module.module.module.language_model.encoder.layers.0.self_attention.dense.RowParallelLinear.forward.0"


def _analyze(tmp_path: Path, train: Path, infer: Path, map_arg: str):
    lake = tmp_path / "lake"
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(train), "--infer", str(infer), "--map", map_arg,
                                  "--out", str(tmp_path / "out"), "--run-id", "r", "--lake", str(lake), "--build",
                                  "--no-charts"])
    assert r.exit_code in (0, 3), r.output       # 3: nothing comparable (documented), lake still written
    return lake, r.output


@pytest.mark.skipif(not LLAMA.is_dir(), reason="shared real_public fixtures absent")
def test_md5_dump_keeps_msprobe_summary_and_md5_gates_boundary_results(tmp_path):
    lake, out = _analyze(tmp_path, LLAMA / "npu", LLAMA / "bench", "llama2_megatron_legacy")
    assert "point: round 0 L0.attn_dense.out — class unknown (no tensor: md5/statistics only)" in " ".join(out.split())
    with open_lake(lake) as con:
        # every slot of both sides is msprobe's own summary with its md5 (was: all no_data)
        assert con.sql("select side, status, stats_source, count(*), count(md5) from raw_tensor_stats "
                       "group by all order by side").fetchall() == [
            ("infer", "msprobe_summary", "msprobe", 7098, 7098), ("train", "msprobe_summary", "msprobe", 7152, 7152)]
        got = con.sql("select side, entry, max, min, mean, norm, md5, numel, dtype from raw_tensor_stats "
                      "where io_kind = 'output' and idx = '0' and entry in (?, ?) order by entry, side",
                      params=[EMB, DENSE]).fetchall()
        # dump.json: the Embedding output is bitwise the same on NPU and bench; the attention output
        # projection has the same Max/Min/Mean/Norm on both sides but a different md5
        emb = (0.04156494140625, -0.04058837890625, -0.00010770559310913086, 5.046875, "6a8d076f", 1024 * 4 * 64,
               "torch.float16")
        dense = (0.005702972412109375, -0.0062713623046875, -2.6345252990722656e-05, 0.1395263671875)
        assert got == [("infer", EMB, *emb), ("train", EMB, *emb),
                       ("infer", DENSE, *dense, "ca818cdf", 262144, "torch.float16"),
                       ("train", DENSE, *dense, "42873fbc", 262144, "torch.float16")]
        # the md5 gate as the lake holds it: each activation boundary's source slots joined to their md5
        rows = con.sql("""
            select b.boundary, b.status, t.md5 = i.md5 as md5_equal
            from raw_boundary_results b
            join raw_tensor_stats t on t.side = 'train' and t.entry || ' ' || t.io_kind || '.' || t.idx = b.train_source
            join raw_tensor_stats i on i.side = 'infer' and i.entry || ' ' || i.io_kind || '.' || i.idx = b.infer_source
            where b.kind = 'activation' order by b.position""").fetchall()
        assert len(rows) == 34 and all((st == "EXACT") == eq for _, st, eq in rows)
        assert [b for b, st, _ in rows if st == "EXACT"] == ["embed", "L0.input_norm.out", "L0.qkv.out",
                                                             "L0.attn_core.out"]
        assert {st for _, st, eq in rows if not eq} == {"NOT_EXACT"}
        # the dump mart counts them
        assert con.sql("select side, tensors_read, msprobe_summaries, md5_slots, distinct_md5 "
                       "from fct_dump_tensor_stats order by side").fetchall() == [
            ("infer", 0, 7098, 7098, 1883), ("train", 0, 7152, 7152, 1911)]


@pytest.mark.skipif(not MINDSPEED.is_dir(), reason="shared real_public fixtures absent")
def test_statistics_dump_keeps_msprobe_statistics_and_never_claims_exact(tmp_path):
    """The real MindSpeed-LLM statistics dump against itself: its statistics reach the lake, parameters_grad
    slots included, and equal statistics still leave every boundary evidence_missing (never EXACT)."""
    m = write_map(tmp_path / "m.yaml", [
        {"name": "embed", "op": "embedding", "inputs": [],
         "train": {"module": "embedding.word_embeddings.*", "io": "output", "index": 0},
         "infer": {"module": "embedding.word_embeddings.*", "io": "output", "index": 0}},
        {"name": "L0.input_layernorm.out", "op": "norm", "inputs": ["embed"],
         "train": {"module": "decoder.layers.0.input_layernorm.*", "io": "output", "index": 0},
         "infer": {"module": "decoder.layers.0.input_layernorm.*", "io": "output", "index": 0}}],
        sides={"train": {"strip_segments": ["module"]}, "infer": {"strip_segments": ["module"]}})
    lake, _ = _analyze(tmp_path, MINDSPEED, MINDSPEED, str(m))
    with open_lake(lake) as con:
        assert con.sql("select status, stats_source, count(*), count(md5), count(max) from raw_tensor_stats "
                       "where side = 'train' group by all").fetchall() == [("msprobe_summary", "msprobe", 357, 0, 357)]
        assert con.sql("select count(*) from raw_tensor_stats where side = 'train' and io_kind = 'parameters_grad'"
                       ).fetchone() == (13,)
        emb_in = "Module.module.module.embedding.word_embeddings.VocabParallelEmbedding.forward.0"
        assert con.sql("select max, min, mean, norm, numel, data_name from raw_tensor_stats where side = 'train' "
                       "and entry = ? and io_kind = 'input' and idx = '0'", params=[emb_in]).fetchone() == (
            30119.0, 1.0, 8688.95703125, 906803.375, 4096, emb_in + ".input.0.pt")
        grad = "Module.module.module.embedding.word_embeddings.VocabParallelEmbedding.parameters_grad"
        assert con.sql("select idx, max, norm, numel from raw_tensor_stats where side = 'train' and entry = ?",
                       params=[grad]).fetchone() == ("weight.0", 0.1494140625, 4.96875, 16000 * 4096)
        res = con.sql("select boundary, status from raw_boundary_results where kind = 'activation' "
                      "order by position").fetchall()
        assert res == [("embed", "evidence_missing"), ("L0.input_layernorm.out", "evidence_missing")]
