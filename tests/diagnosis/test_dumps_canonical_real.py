"""Production-shaped dumps written by the REAL msprobe (tests/fixtures/msprobe_shapes.py): TP=2 (two gloo
processes), PP=2 (two gloo processes, stage-local layer names), a left-padded training batch of 2, a prefix-cache
hit, a chunked prefill over two msprobe steps and an fp16 rollout.

Each kind: the canonical tensors (:mod:`tilake.diagnosis.canonical`) equal the unsharded / unpadded /
single-stage reference run's bitwise, slot by slot, and the analysis gives the reference answer (every boundary
EXACT, no confirmed weight-sync / config / input hypothesis), with the merge / selection named in the task card,
the MD and the HTML report. Skipped without a Python that has msprobe (``$TILAKE_MSPROBE_PYTHON``, as
tests/diagnosis/test_dumps_real_msprobe.py).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from msprobe_python import PY, requires_msprobe

from tilake.cli import main
from tilake.diagnosis import analyze as A
from tilake.diagnosis import maps as M
from tilake.diagnosis.steps import open_sides

GEN = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe_shapes.py"


pytestmark = requires_msprobe
SIDES = [("ref", "train"), ("ref", "infer"), ("tp2", "infer"), ("pp2", "train"), ("padded", "train"),
         ("prefix", "infer"), ("chunked", "infer"), ("fp16", "infer"), ("int8", "infer"), ("pp4", "train"),
         ("pp4", "infer"), ("tp2s", "infer")]
MB3 = 3 * 1024 * 1024


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")

    def gen(ks):
        kind, side = ks
        out = root / f"{kind}_{side}"
        p = subprocess.run([PY, str(GEN), kind, side, str(out)], capture_output=True, text=True, cwd=str(root))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        return ks, out

    with ThreadPoolExecutor(2) as ex:   # the CI box has 2 cores
        out = dict(ex.map(gen, SIDES))
    return out


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def _pair(train, infer):
    return A.Pair(train, infer, M.load_map("qwen3_hf_vllm"))


def _same_slots(canon, ref, cut=None):
    """Every module slot of the reference side has a bitwise-equal logical tensor; returns how many."""
    n = 0
    for sl in ref.slots:
        if not sl.entry.startswith("Module.") or not sl.data_name:
            continue
        c = canon.slot(sl.entry, sl.io, sl.index)
        assert c is not None, f"canonical side lacks {sl.entry} {sl.io}.{sl.index}"
        a, b = canon.load(c), ref.load(sl)
        if cut is not None and sl.io != "parameter":
            b = cut(b)
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(a, b), \
            (sl.entry, sl.io, sl.index, list(a.shape), list(b.shape))
        assert list(c.declared_shape) == list(a.shape), (sl.entry, c.declared_shape, list(a.shape))
        n += 1
    return n


def _analyse(train, infer, **kw):
    an = A.analyze_pair([A.RoundInput(train, infer)], M.load_map("qwen3_hf_vllm"), kw or None)
    hyp = {h["hypothesis"]: h["status"] for h in an.hypotheses}
    for h in ("weights not in sync", "model configs not equivalent", "inputs not aligned / padding not removed"):
        assert hyp[h] != "confirmed", (h, [x for x in an.hypotheses if x["hypothesis"] == h])
    return an, hyp


def _exact(an):
    assert an.verdict == "exact" and an.consistency == "bitwise", an.verdict_reason
    assert an.rounds[0]["counts"] == {"EXACT": 35}
    assert sum(1 for w in an.weight_rows if w["status"] == "EXACT") == 15


def test_sizes_stay_small(dumps):
    for ks, p in dumps.items():
        assert _size(p) <= MB3, (ks, _size(p))


def test_reference_pair_is_exact(dumps):
    an, hyp = _analyse(dumps["ref", "train"], dumps["ref", "infer"])
    _exact(an)
    assert an.canonical == [] and hyp["weights not in sync"] == "excluded"


def test_tp2_shards_merge_to_the_unsharded_tensors(dumps, tmp_path):
    pair = _pair(dumps["ref", "train"], dumps["tp2", "infer"])
    ref = _pair(dumps["ref", "train"], dumps["ref", "infer"])
    n = _same_slots(pair.dumps["infer"], ref.dumps["infer"])
    assert n >= 100   # qkv / gate_up per fused segment, row-parallel inputs/weights, vocab-parallel embedding
    an, hyp = _analyse(dumps["ref", "train"], dumps["tp2", "infer"])
    _exact(an)
    (rec,) = an.canonical
    assert rec["kind"] == "tp" and rec["tp"] == 2 and rec["ranks"] == ["rank0", "rank1"]
    assert hyp["parallel layout differs"] == "excluded"
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(dumps["ref", "train"]), "--infer",
                                  str(dumps["tp2", "infer"]), "--out", str(tmp_path / "o"), "--no-charts"])
    assert r.exit_code == 0, r.output
    text = "infer TP=2 merged from rank0, rank1"
    assert text in json.dumps(json.loads((tmp_path / "o" / "task_card.json").read_text())["canonical"])
    assert text in (tmp_path / "o" / "alignment_report.md").read_text()
    assert text in (tmp_path / "o" / "alignment_report.html").read_text()


def test_tp_missing_rank_and_mismatched_steps_are_one_error_line(dumps, tmp_path):
    gone = tmp_path / "gone"
    shutil.copytree(dumps["tp2", "infer"], gone)
    (gone / "step0" / "rank2").mkdir()
    shutil.copytree(gone / "step0" / "rank1", gone / "step0" / "rank3")
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(dumps["ref", "train"]), "--infer", str(gone),
                                  "--out", str(tmp_path / "o1"), "--no-charts"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert "rank2" in line and "missing" in line and str(gone / "step0") in line
    steps = tmp_path / "steps"
    shutil.copytree(dumps["tp2", "infer"], steps)
    shutil.copytree(steps / "step0" / "rank0", steps / "step1" / "rank0")
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(dumps["ref", "train"]), "--infer", str(steps),
                                  "--out", str(tmp_path / "o2"), "--no-charts"])
    assert r.exit_code != 0 and "Traceback" not in r.output
    (line,) = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert "step1 has rank0" in line and "mismatched steps" in line


def test_pp2_stages_join_with_a_layer_offset(dumps):
    pair = _pair(dumps["pp2", "train"], dumps["ref", "infer"])
    ref = _pair(dumps["ref", "train"], dumps["ref", "infer"])
    assert pair.layer_counts["train"] == 2 and not pair.stage_ends["train"]
    assert _same_slots(pair.dumps["train"], ref.dumps["train"]) >= 60
    an, hyp = _analyse(dumps["pp2", "train"], dumps["ref", "infer"])
    _exact(an)
    (rec,) = an.canonical
    assert rec["kind"] == "pp" and rec["layer_offsets"] == [0, 1] and "send/recv" in rec["text"]


def test_pp4_one_layer_per_stage_statistics_join_by_rank_not_by_name(dumps):
    """PP=4 with one layer per stage (ModelLink's shape): every middle stage dumps ``model.layers.0``, so the
    ranks only look like one TP group; the send/recv calls make them stages, joined in rank order with layer
    offsets 0..3, and each layer's boundaries are gated by msprobe's statistics (never called EXACT)."""
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(dumps["pp4", "train"]), "--infer",
                                  str(dumps["pp4", "infer"]), "--map", "qwen3_hf_vllm", "--out",
                                  str(dumps["pp4", "train"].parent / "pp4_out"), "--no-charts"])
    assert r.exit_code == 3, r.output   # statistics only: nothing can be proven EXACT
    src = json.loads((dumps["pp4", "train"].parent / "pp4_out" / "report_source.json").read_text())
    (rec,) = [c for c in src["canonical"] if c["kind"] == "pp"]
    assert rec["pp"] == 4 and rec["layer_offsets"] == [0, 1, 2, 3] and rec["stages"] == ["rank0", "rank1", "rank2",
                                                                                          "rank3"]
    assert src["sides"]["train"]["layers"] == 4
    names = [b["boundary"] for b in src["boundaries"]]
    assert names[0] == "embed" and names.index("L3.input_layernorm.out") > names.index("L2.layer.out")
    l3 = next(b for b in src["boundaries"] if b["boundary"] == "L3.input_layernorm.out")
    assert l3["status"] == "evidence_missing" and "statistics equal" in l3["reason"]


def test_tp2_statistics_merge_only_as_statistics_allow(dumps):
    """TP=2 shards in statistics mode: a column-parallel output's merged Max/Min/Mean/Norm (extremes, element-
    weighted mean, root of summed squares) equal the unsharded run's within the reduction tolerance; a fused
    qkv output needs the tensor (its slices cannot be taken from statistics) and says so."""
    an, _hyp = _analyse(dumps["ref", "train"], dumps["tp2s", "infer"])
    rows = {r["boundary"]: r for r in an.boundary_rows}
    for b in ("L0.o_proj.out", "L0.act_mul.out", "L1.down_proj.out"):
        assert rows[b]["status"] == "evidence_missing" and rows[b]["reason"].startswith("statistics equal"), rows[b]
    merged = rows["L0.act_mul.out"]
    assert "merged from 2 non-overlapping shards" in merged["reason"]
    assert "collect tensor mode" in rows["L0.q_proj.out"]["reason"]
    assert not any(r.get("stats_differ") for r in an.boundary_rows)


def test_left_padded_batch_row_selected_by_ids(dumps):
    pair = _pair(dumps["padded", "train"], dumps["ref", "infer"])
    ref = _pair(dumps["ref", "train"], dumps["ref", "infer"])
    assert _same_slots(pair.dumps["train"], ref.dumps["train"]) >= 60
    an, _hyp = _analyse(dumps["padded", "train"], dumps["ref", "infer"])
    _exact(an)
    (rec,) = an.canonical
    assert rec["batch_row"] == 1 and rec["padding"] == "left" and rec["rows"] == [2, 10]


def test_padded_batch_with_the_choice_left_to_the_user_is_evidence_missing_not_a_traceback(dumps):
    # --request-index hands the choice to the user (no automatic selection): the 4-D RoPE tensor of the
    # batch of 2 no longer fits the map's permute; that boundary is evidence_missing with the reason
    an = A.analyze_pair([A.RoundInput(dumps["padded", "train"], dumps["ref", "infer"])],
                        M.load_map("qwen3_hf_vllm"), {"request_index": 1})
    rope = next(r for r in an.boundary_rows if r["boundary"] == "L0.q_after_rope")
    assert rope["status"] == "evidence_missing" and "not comparable: transform permute" in rope["reason"]


def test_prefix_cache_hit_compares_the_training_rows_at_the_positions(dumps):
    pair = _pair(dumps["ref", "train"], dumps["prefix", "infer"])
    ref = _pair(dumps["ref", "train"], dumps["ref", "infer"])
    # the prefill of the uncached tokens is bitwise the full prefill's rows 4..7 (token-major [S, ...])
    assert _same_slots(pair.dumps["infer"], ref.dumps["infer"],
                       cut=lambda t: t[4:8] if t.dim() and t.shape[0] == 8 else t) >= 60
    an, _hyp = _analyse(dumps["ref", "train"], dumps["prefix", "infer"])
    _exact(an)
    (rec,) = an.canonical
    assert rec["side"] == "train" and rec["rows"] == [4, 8] and "prefix-cache hit: training rows 4–7" in rec["text"]


def test_chunked_prefill_joins_consecutive_steps(dumps):
    sides, steps = open_sides(dumps["ref", "train"], dumps["chunked", "infer"], M.load_map("qwen3_hf_vllm"))
    assert "+" in steps["infer"]["used"]
    ref = _pair(dumps["ref", "train"], dumps["ref", "infer"])
    assert _same_slots(sides["infer"], ref.dumps["infer"]) >= 60
    an, _hyp = _analyse(dumps["ref", "train"], dumps["chunked", "infer"])
    _exact(an)
    (rec,) = an.canonical
    assert rec["kind"] == "chunks" and rec["rows"] == [4, 4]


def test_fp16_rollout_is_a_configuration_finding_compared_in_bf16(dumps):
    an, hyp = _analyse(dumps["ref", "train"], dumps["fp16", "infer"])
    assert an.verdict == "nonzero" and an.consistency == "precision_config", an.verdict_reason
    assert hyp["precision configuration differs (compute dtype)"] == "confirmed"
    assert hyp["weights not in sync"] == "excluded" and hyp["inputs not aligned / padding not removed"] == "excluded"
    assert not [p for p in an.points if p["class"] == "logic-level"]
    assert not an.stub_instruction.get("needed")
    assert all(r["status"] == "DTYPE_DIFF" and r["downcast"]["to"] == "torch.bfloat16" for r in an.boundary_rows)


def test_int8_weights_dequantised_weight_sync_excluded(dumps):
    # W8A16 rollout weights: dequantised with weight_scale and judged against half a quantisation step (the
    # linear outputs against the propagated quantisation error: tests/diagnosis/test_dumps_canonical_more.py)
    an, hyp = _analyse(dumps["ref", "train"], dumps["int8", "infer"])
    (rec,) = an.canonical
    assert rec["kind"] == "quant" and rec["weights"] == 8 and "per channel" in rec["text"]
    assert hyp["weights not in sync"] == "excluded"
    assert sum(1 for w in an.weight_rows if (w.get("quantisation") or {}).get("within")) == 14
    assert hyp["fused kernel / accumulation order"] != "confirmed"
    assert an.rounds[0]["first_divergence"]["boundary"] == "L0.q_proj.out"
