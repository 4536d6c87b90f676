"""Findings on real-dump kinds (issue "Dump diagnosis that stays right on real dumps"): magnitude bias,
filtered signed means, row / column localisation, and what follows from them in the verdict."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from msprobe_mini import write_dump, write_map  # noqa: E402

from tilake.diagnosis import analyze as A  # noqa: E402
from tilake.diagnosis import maps as M  # noqa: E402
from tilake.diagnosis import outputs as O  # noqa: E402
from tilake.diagnosis.logprob import read_logprob  # noqa: E402
from tilake.diagnosis.numerics import compare  # noqa: E402
from tilake.errors import TilakeError  # noqa: E402


def toward_zero(x: torch.Tensor, share: float, seed: int) -> torch.Tensor:
    """``x`` (bf16) with about ``share`` of its non-zero elements moved one ULP toward zero (truncation)."""
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(x.shape, generator=g) < share) & (x != 0)
    return (x.view(torch.int16) - m.to(torch.int16)).view(torch.bfloat16)  # sign-magnitude: magnitude − 1


def chain(tmp: Path, names, train, infer, ops=None, **map_extra):
    """A linear chain of boundaries ``names[i]`` (input: ``names[i-1]``), one module output each."""
    ops = ops or ["embedding"] + ["matmul"] * (len(names) - 1)
    ents = lambda ts: [(f"Module.m.{n}.Lin.forward.0", None, {"output": [t]}) for n, t in zip(names, ts)]  # noqa: E731
    tr = write_dump(tmp / "train", ents(train))
    inf = write_dump(tmp / "infer", ents(infer))
    bs = [{"name": n, "op": o, "inputs": [names[i - 1]] if i else [],
           "train": {"module": f"m.{n}.Lin"}, "infer": {"module": f"m.{n}.Lin"}} for i, (n, o) in enumerate(zip(names, ops))]
    bmap = M.load_map(str(write_map(tmp / "chain.yaml", bs, **map_extra)))
    return A.analyze_pair([A.RoundInput(tr, inf)], bmap)


def test_truncating_kernel_is_a_toward_zero_bias_that_value_signed_means_miss(tmp_path):
    g = torch.Generator().manual_seed(3)
    emb = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    h = torch.randn(8, 64, generator=g).to(torch.bfloat16)      # zero-centred activations
    n = torch.randn(8, 64, generator=g).to(torch.bfloat16)
    an = chain(tmp_path, ["embed", "h", "norm"], [emb, h, n], [emb, toward_zero(h, 0.4, 1), toward_zero(n, 0.4, 2)],
               ops=["embedding", "matmul", "norm"])
    rows = {r["boundary"]: r for r in an.boundary_rows}
    r = rows["h"]
    assert r["max_elem_ulp"] == 1 and r["class"] == "rounding-level"
    assert r["mag_signed_mean_ulp"] == -1.0 and r["share_smaller_magnitude"] == 1.0
    assert abs(r["signed_mean_ulp"]) < 0.2          # the value-signed mean cancels on zero-centred data
    assert r["systematic_bias"] is True and r["bias"]["kind"] == "toward_zero"
    assert any("biased rounding" in e and "accumulates with depth" in e for e in r["class_evidence"])
    # recurring downstream: still flagged
    assert rows["norm"]["systematic_bias"] is True and rows["norm"]["bias"]["kind"] == "toward_zero"
    assert an.points[0]["boundary"] == "h" and an.points[0]["bias"]["kind"] == "toward_zero"
    assert an.consistency == "rounding_biased"
    assert "agree up to floating-point rounding" not in an.verdict_reason
    src = O.report_source(an, {})
    b = next(x for x in src["boundaries"] if x["boundary"] == "h")
    assert b["mag_signed_mean_ulp"] == -1.0 and b["share_smaller_magnitude"] == 1.0 and b["bias"]["kind"] == "toward_zero"


def test_unbiased_rounding_noise_is_not_a_bias(tmp_path):
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    g = torch.Generator().manual_seed(5)
    step = torch.randint(-1, 2, x.shape, generator=g).to(torch.int16)   # −1, 0, +1 bit steps at random
    y = torch.where(x != 0, (x.view(torch.int16) + step).view(torch.bfloat16), x)
    r = compare(x, y)
    assert r["share_smaller_magnitude"] is not None and 0.3 < r["share_smaller_magnitude"] < 0.7
    row = {"status": "NOT_EXACT", "op": "matmul", "inputs": ["a"], **r}
    A.classify(row, {"a": {"status": "EXACT"}}, {})
    assert row["systematic_bias"] is False and row["bias"] is None


def test_signed_means_skip_near_zero_elements_and_sign_flips():
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    x[0, :4] = torch.tensor([1e-3, -2e-3, 5e-4, 1e-3])               # far below absmax/64
    y = torch.where(x.abs() >= x.abs().max() / 64, (x.view(torch.int16) + 1).view(torch.bfloat16), x)
    y[0, :4] = -x[0, :4]                                               # sign flips: ~30 000 ULP apart
    r = compare(x, y)
    assert r["max_elem_ulp"] > 20000 and r["max_elem_ulp_significant"] == 1
    pos = x.abs() >= x.abs().max() / 64
    n_up, n = int((x[pos] > 0).sum()), int(pos.sum())                # +1 bit step: up for x > 0, down for x < 0
    want = (n_up - (n - n_up)) / n
    assert r["signed_mean_ulp"] == want and r["mag_signed_mean_ulp"] == 1.0
    assert r["signed_count"] == int(pos.sum()) and "absmax(reference)/64" in r["signed_filter"]


def test_logic_fault_in_two_token_rows_is_localised(tmp_path):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    att = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    bad = att.clone()
    noise = torch.randint(0, 2, att.shape, generator=g).to(torch.int16)   # attention's ordinary 1-bit noise
    bad = torch.where(att != 0, (bad.view(torch.int16) + noise).view(torch.bfloat16), bad)
    bad[3] = torch.randn(64, generator=g).to(torch.bfloat16)            # wrong mask / position in rows 3 and 5
    bad[5] = (att[5].float() * 1.5).to(torch.bfloat16)
    an = chain(tmp_path, ["q", "attn"], [q, att], [q, bad], ops=["matmul", "attention"])
    r = next(x for x in an.boundary_rows if x["boundary"] == "attn")
    assert r["rows_differing"] == 16 and r["class"] == "logic-level"
    assert r["logic_rows"] == [3, 5] and r["logic_rows_count"] == 2
    assert len(r["row_tensor_ulp"]) == 16 and max(r["row_tensor_ulp"][i] for i in range(16) if i not in (3, 5)) <= 1
    assert any("confined to 2 of 16 rows" in e for e in r["class_evidence"])
    src = O.report_source(an, {})
    assert next(p for p in src["points"] if p["boundary"] == "attn")["logic_rows"] == [3, 5]


def test_stale_weight_row_shows_as_one_output_column():
    g = torch.Generator().manual_seed(8)
    x = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    y = x.clone()
    y[:, 7] = (x[:, 7].float() * 0.5 + 0.3).to(torch.bfloat16)
    r = compare(x, y)
    assert r["logic_cols"] == [7] and r["logic_cols_count"] == 1
    assert r["pattern"] == "whole_columns"
    assert 0.9 < r["cosine"] < 1.0


def _embed_pair(tmp: Path, ids_train: torch.Tensor, ids_infer: torch.Tensor):
    g = torch.Generator().manual_seed(9)
    table = torch.randn(32, 16, generator=g).to(torch.bfloat16)
    h = lambda ids: (table[ids] * 2).to(torch.bfloat16)  # noqa: E731
    ents = lambda ids, pre: [("Module.m.E.Emb.forward.0", None, {"input": [pre(ids)], "output": [table[ids]]}),  # noqa: E731
                             ("Module.m.H.Lin.forward.0", None, {"output": [h(ids)]})]
    tr = write_dump(tmp / "train", ents(ids_train, lambda t: t[None]))     # HF: [1, S]
    inf = write_dump(tmp / "infer", ents(ids_infer, lambda t: t))          # vLLM: [S]
    bs = [{"name": "embed", "op": "embedding", "inputs": [], "train": {"module": "m.E.Emb"}, "infer": {"module": "m.E.Emb"},
           "stub": {"infer": {"module": "m.H.Lin", "inputs": {"0": {"module": "m.E.Emb"}}}}},
          {"name": "h", "op": "matmul", "inputs": ["embed"], "train": {"module": "m.H.Lin"}, "infer": {"module": "m.H.Lin"}}]
    bmap = M.load_map(str(write_map(tmp / "emb.yaml", bs, layer_input={"first": "embed"})))
    return A.analyze_pair([A.RoundInput(tr, inf)], bmap)


def test_token_ids_shifted_by_one_are_the_first_finding(tmp_path):
    ids = torch.randint(0, 32, (9,), generator=torch.Generator().manual_seed(10))
    an = _embed_pair(tmp_path, ids[:8], ids[1:])
    assert an.token_ids["status"] == "differ" and an.token_ids["differing"] == 8 and an.token_ids["positions"] == 8
    assert an.token_ids["shift"] == 1
    assert an.verdict_reason.startswith("token ids differ at 8/8 positions")
    assert an.consistency == "inputs_differ" and an.rounds[0]["outcome"] == "token_ids_differ"
    assert an.stub_instruction["needed"] is False and an.points == []
    emb = next(r for r in an.boundary_rows if r["boundary"] == "embed")
    assert emb["inputs_equal"] is False and emb["role"] == "propagated"
    hyp = {h["hypothesis"]: h for h in an.hypotheses}["inputs not aligned / padding not removed"]
    assert hyp["status"] == "confirmed" and hyp["evidence"][0].startswith("token ids differ at 8/8")
    assert O.report_source(an, {})["token_ids"]["differing"] == 8


def test_equal_token_ids_are_recorded(tmp_path):
    ids = torch.randint(0, 32, (8,), generator=torch.Generator().manual_seed(11))
    an = _embed_pair(tmp_path, ids, ids.clone())
    assert an.token_ids["status"] == "equal" and an.token_ids["positions"] == 8
    assert an.verdict == "exact"


def test_risk_rating_names_its_rule(tmp_path):
    from tilake.diagnosis.risk import rate

    assert rate({"class": "logic-level", "op": "attention"})["risk"] == "critical"
    assert rate({"class": "logic-level", "boundary": "logits", "op": "matmul"})["risk_rule"] == "logic_at_attention_or_logits"
    assert rate({"class": "logic-level", "op": "matmul"})["risk"] == "high"
    assert rate({"class": "rounding-level", "op": "matmul", "systematic_bias": True})["risk_rule"] == "biased_rounding"
    r = rate({"class": "rounding-level", "op": "norm", "systematic_bias": False})
    assert r["risk"] == "medium" and "accumulates over layers" in r["risk_reason"]
    assert rate({"class": "rounding-level", "op": "matmul", "systematic_bias": False})["risk"] == "low"


def test_risk_and_row_curve_reach_the_reports(tmp_path):
    from tilake.reports.dumps_report import render_reports

    g = torch.Generator().manual_seed(7)
    q = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    att = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    bad = att.clone()
    bad[3] = torch.randn(64, generator=g).to(torch.bfloat16)
    an = chain(tmp_path, ["q", "attn"], [q, att], [q, bad], ops=["matmul", "attention"])
    p = an.points[0]
    assert (p["boundary"], p["risk"], p["risk_rule"]) == ("attn", "critical", "logic_at_attention_or_logits")
    from tilake.ingest.msprobe.reader import DumpSide

    card = O.task_card(*(DumpSide(Path(an.sides[s]["path"]), s) for s in ("train", "infer")))
    src = O.report_source(an, card)
    assert next(b for b in src["boundaries"] if b["boundary"] == "attn")["risk"] == "critical"
    paths = render_reports(src, tmp_path, charts=True)
    html, md = paths["report_html"].read_text(), paths["report_md"].read_text()
    assert "critical" in md and "\\[3\\]" in md   # Markdown-escaped "[3]" (reports/escape.py)
    assert 'class="risk-critical"' in html and "error per row" in html and "<polyline" in html


@pytest.mark.parametrize("text, says", [
    ('{"mean": NaN, "max": 0.1}', "NaN is not JSON"),
    ('{"mean": "0.1", "max": 0.2}', "'mean' must be a number"),
    ('{"mean": [0.1], "max": 0.2}', "'mean' must be a number"),
    ('[0.1, 0.2]', "expected a JSON object"),
    ('{"mean": -0.1, "max": 0.2}', "'mean' is negative"),
    ('{"mean": 0.3, "max": 0.2}', "max 0.2 < mean 0.3"),
    ('{"mean": 0.1}', "'max' is missing"),
    ('{"mean": 0.1, "max": Infinity}', "Infinity is not JSON"),
])
def test_logprob_json_fails_closed(tmp_path, text, says):
    p = tmp_path / "lp.json"
    p.write_text(text)
    with pytest.raises(TilakeError) as ei:
        read_logprob(p)
    msg = str(ei.value)
    assert says in msg and str(p) in msg and "\n" not in msg


def test_logprob_json_refused_at_the_cli_with_one_line(tmp_path):
    from tilake.cli import main

    p = tmp_path / "lp.json"
    p.write_text('{"mean": NaN, "max": 0.1}')
    d = write_dump(tmp_path / "t", [("Module.m.A.Lin.forward.0", None, {"output": [torch.ones(2, 2)]})])
    r = CliRunner().invoke(main, ["dumps", "analyze", "--train", str(d), "--infer", str(d), "--out",
                                  str(tmp_path / "o"), "--logprob-json", str(p), "--no-charts"])
    assert r.exit_code == 2 and "NaN is not JSON" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o" / "report_source.json").exists()


def test_zero_logprob_next_to_logic_level_logits_is_inconsistent_and_json_is_strict(tmp_path):
    g = torch.Generator().manual_seed(12)
    h = torch.randn(8, 32, generator=g).to(torch.bfloat16)
    lg = torch.randn(8, 32, generator=g).to(torch.bfloat16)
    tr = write_dump(tmp_path / "train", [("Module.m.H.Lin.forward.0", None, {"output": [h]}),
                                          ("Module.m.L.Lin.forward.0", None, {"output": [lg]})])
    inf = write_dump(tmp_path / "infer", [("Module.m.H.Lin.forward.0", None, {"output": [h]}),
                                           ("Module.m.L.Lin.forward.0", None, {"output": [lg * 2]})])
    bs = [{"name": "h", "op": "matmul", "inputs": [], "train": {"module": "m.H.Lin"}, "infer": {"module": "m.H.Lin"}},
          {"name": "logits", "op": "matmul", "inputs": ["h"], "train": {"module": "m.L.Lin"}, "infer": {"module": "m.L.Lin"}}]
    bmap = M.load_map(str(write_map(tmp_path / "m.yaml", bs)))
    an = A.analyze_pair([A.RoundInput(tr, inf)], bmap, logprob={"mean": 0.0, "max": 0.0})
    assert an.logprob["consistent_with_dumps"] is False
    assert an.logprob["findings"][0].startswith("inconsistent: the measured prefill log-prob max diff is 0 but logits")
    an.points[0]["cosine"] = float("nan")        # a non-finite figure must not reach the file as bare NaN
    paths = O.write_outputs(an, {}, tmp_path / "o")
    src = json.loads(paths["report_source"].read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert src["points"][0]["cosine"] is None
    assert any(x.startswith("inconsistent:") for x in src["limitations"])


def test_softmax_skipped_is_constant_across_query_positions(tmp_path):
    g = torch.Generator().manual_seed(13)
    q = torch.randn(8, 32, generator=g).to(torch.bfloat16)
    v = torch.randn(8, 32, generator=g)
    att = torch.softmax(torch.randn(8, 8, generator=g), -1) @ v
    mean_v = v.mean(0, keepdim=True).expand(8, 32)                    # uniform weights: every query gets mean(V)
    an = chain(tmp_path, ["q", "attn"], [q, att.to(torch.bfloat16)], [q, mean_v.to(torch.bfloat16)],
               ops=["matmul", "attention"])
    r = next(x for x in an.boundary_rows if x["boundary"] == "attn")
    assert r["constant_rows"]["side"] == "infer" and r["constant_rows"]["rows"] == 8
    assert r["class"] == "logic-level"
    assert any("constant across query positions" in e for e in r["class_evidence"])
    p = an.points[0]
    assert p["cosine"] is not None and p["cosine"] < 0.99 and p["risk"] == "critical"


def test_fp32_cache_stored_as_bf16_is_a_precision_downgrade(tmp_path):
    g = torch.Generator().manual_seed(14)
    q = torch.randn(8, 32, generator=g).to(torch.bfloat16)
    kv = torch.randn(8, 32, generator=g)                                # fp32 on the training side
    an = chain(tmp_path, ["q", "kv"], [q, kv], [q, kv.to(torch.bfloat16)], ops=["matmul", "matmul"])
    r = next(x for x in an.boundary_rows if x["boundary"] == "kv")
    assert r["status"] == "DTYPE_DIFF" and r["downcast"]["exact"] is True and r["downcast"]["to"] == "torch.bfloat16"
    assert r["precision_downgrade"] is True and r["class"] == "rounding-level"
    assert "the infer side is exactly the downcast train tensor (float32 → bfloat16)" in r["reason"]
    assert an.points[0]["risk_rule"] == "precision_downgrade"


def test_dtype_diff_that_is_not_a_downcast_stays_logic_level(tmp_path):
    g = torch.Generator().manual_seed(15)
    q = torch.randn(8, 32, generator=g).to(torch.bfloat16)
    kv = torch.randn(8, 32, generator=g)
    bad = kv.to(torch.bfloat16)
    bad[2, 3] = -bad[2, 3]
    an = chain(tmp_path, ["q", "kv"], [q, kv], [q, bad], ops=["matmul", "matmul"])
    r = next(x for x in an.boundary_rows if x["boundary"] == "kv")
    assert r["downcast"]["exact"] is False and r["downcast"]["status"] == "NOT_EXACT"
    assert r["class"] == "logic-level" and "not the downcast train tensor" in r["reason"]
    assert "1 elements still differ" in r["reason"]


def _batched_pair(tmp: Path):
    """Train: one request of 8 tokens (separate q, hidden h); infer: a 12-token batch, request in rows 0:8,
    fused qkv [q; k; v] (q_size 32, kv_size 16)."""
    g = torch.Generator().manual_seed(16)
    q, k, v = (torch.randn(12, n, generator=g).to(torch.bfloat16) for n in (32, 16, 16))
    h = torch.randn(12, 32, generator=g).to(torch.bfloat16)
    tr = write_dump(tmp / "train", [("Module.m.Q.Lin.forward.0", None, {"output": [q[:8]]}),
                                     ("Module.m.H.Lin.forward.0", None, {"output": [h[:8]]})])
    inf = write_dump(tmp / "infer", [("Module.m.QKV.Lin.forward.0", None, {"output": [torch.cat([q, k, v], -1)]}),
                                      ("Module.m.H.Lin.forward.0", None, {"output": [h]})])
    bs = [{"name": "q", "op": "matmul", "inputs": [], "train": {"module": "m.Q.Lin"},
           "infer": {"module": "m.QKV.Lin", "transforms": [{"qkv_part": {"part": "q", "layout": "auto"}}]}},
          {"name": "h", "op": "matmul", "inputs": ["q"], "train": {"module": "m.H.Lin"}, "infer": {"module": "m.H.Lin"}}]
    return tr, inf, M.load_map(str(write_map(tmp / "b.yaml", bs, dims={"q_size": 32, "kv_size": 16, "head_dim": 8})))


def test_request_tokens_slice_before_the_fused_layout_scan(tmp_path):
    tr, inf, bmap = _batched_pair(tmp_path)
    an = A.analyze_pair([A.RoundInput(tr, inf)], bmap, pairing={"request_tokens": [0, 8]})
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert rows["q"]["status"] == "EXACT" and rows["h"]["status"] == "EXACT"
    assert an.layout_scans[0]["chosen"] == "concat" and an.layout_scans[0]["scores"]["concat"] == pytest.approx(1.0)
    assert an.verdict == "exact"


def test_more_tokens_on_one_side_without_the_flag_says_which_flag(tmp_path):
    tr, inf, bmap = _batched_pair(tmp_path)
    an = A.analyze_pair([A.RoundInput(tr, inf)], bmap)
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert rows["q"]["status"] == "evidence_missing" and "--request-tokens 0:8" in rows["q"]["reason"]
    assert rows["h"]["status"] == "SHAPE_DIFF" and "--request-tokens 0:8" in rows["h"]["reason"]


def _step_side(root: Path, steps: dict, table: torch.Tensor):
    """``steps``: {step number: token ids or None (an empty step)} written as <root>/step<n>/rank0."""
    for n, ids in steps.items():
        if ids is None:
            d = root / f"step{n}" / "rank0"
            d.mkdir(parents=True)
            (d / "dump.json").write_text(json.dumps({"task": "tensor", "level": "mix", "data": {}}))
            continue
        write_dump(root, [("Module.m.E.Emb.forward.0", None, {"input": [ids], "output": [table[ids]]})],
                   folder=f"step{n}/rank0")
    return root


def _steps_map(tmp: Path):
    bs = [{"name": "embed", "op": "embedding", "inputs": [], "train": {"module": "m.E.Emb"}, "infer": {"module": "m.E.Emb"}}]
    return M.load_map(str(write_map(tmp / "s.yaml", bs, layer_input={"first": "embed"})))


def test_warm_up_and_empty_steps_are_dropped_and_named(tmp_path):
    table = torch.randn(32, 16, generator=torch.Generator().manual_seed(17)).to(torch.bfloat16)
    ids = torch.randint(1, 32, (8,), generator=torch.Generator().manual_seed(18))
    tr = _step_side(tmp_path / "train", {0: torch.zeros(8, dtype=torch.int64), 1: ids, 2: None}, table)
    inf = _step_side(tmp_path / "infer", {0: ids}, table)
    an = A.analyze_pair([A.RoundInput(tr, inf)], _steps_map(tmp_path))
    ch = an.sides["train"]["step_choice"]
    assert an.sides["train"]["step"] == 1 and ch["used"] == "step1/rank0"
    assert ch["dropped"] == {"step0/rank0": "warm-up (token ids all zero)",
                             "step2/rank0": "empty step (no entry dumped; msprobe writes one after collection)"}
    assert an.verdict == "exact" and any("train: used step1/rank0" in n for n in an.notes)


def test_the_step_whose_token_ids_match_is_used_else_refused(tmp_path):
    table = torch.randn(32, 16, generator=torch.Generator().manual_seed(19)).to(torch.bfloat16)
    g = torch.Generator().manual_seed(20)
    a, b = torch.randint(1, 32, (8,), generator=g), torch.randint(1, 32, (8,), generator=g)
    tr = _step_side(tmp_path / "train", {0: a, 1: b}, table)
    inf = _step_side(tmp_path / "infer", {3: b}, table)
    an = A.analyze_pair([A.RoundInput(tr, inf)], _steps_map(tmp_path))
    assert an.sides["train"]["step"] == 1 and an.sides["infer"]["step"] == 3
    assert an.sides["train"]["step_choice"]["how"] == "the step whose token ids match the other side"
    inf2 = _step_side(tmp_path / "infer2", {0: torch.randint(1, 32, (8,), generator=g)}, table)
    with pytest.raises(TilakeError) as ei:
        A.analyze_pair([A.RoundInput(tr, inf2)], _steps_map(tmp_path))
    assert "train has step0/rank0, step1/rank0; infer has step0/rank0" in str(ei.value)


def _summary_chain(tmp: Path, task: str, infer_h, infer_n):
    g = torch.Generator().manual_seed(21)
    e, h, n = (torch.randn(8, 16, generator=g).to(torch.bfloat16) for _ in range(3))
    names = ["embed", "h", "norm"]
    ents = lambda ts: [(f"Module.m.{k}.Lin.forward.0", None, {"output": [t]}) for k, t in zip(names, ts)]  # noqa: E731
    tr = write_dump(tmp / "train", ents([e, h, n]), task=task)
    inf = write_dump(tmp / "infer", ents([e, infer_h(h), infer_n(n)]), task=task)
    bs = [{"name": k, "op": "matmul", "inputs": [names[i - 1]] if i else [], "train": {"module": f"m.{k}.Lin"},
           "infer": {"module": f"m.{k}.Lin", "transforms": [{"squeeze": 0}]}} for i, k in enumerate(names)]
    return A.analyze_pair([A.RoundInput(tr, inf)], M.load_map(str(write_map(tmp / "s.yaml", bs))))


def test_md5_dumps_run_the_exact_gate_without_tensors(tmp_path):
    an = _summary_chain(tmp_path, "md5", lambda h: h.clone(), lambda n: n * 2)
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert [rows[k]["status"] for k in ("embed", "h", "norm")] == ["EXACT", "EXACT", "NOT_EXACT"]
    assert rows["norm"]["evidence_kind"] == "md5" and rows["norm"]["tensor_ulp"] is None
    assert "ULP unknown" in rows["norm"]["reason"]
    assert an.rounds[0]["first_divergence"]["boundary"] == "norm"
    assert an.points[0]["class"] is None and an.points[0]["risk_rule"] == "unmeasured_difference"
    assert an.consistency == "unknown" and "collect tensor mode for norm" in an.verdict_reason


def test_statistics_only_names_a_candidate_never_exact(tmp_path):
    an = _summary_chain(tmp_path, "statistics", lambda h: h * 2, lambda n: n * 2)
    rows = {r["boundary"]: r for r in an.boundary_rows}
    assert rows["embed"]["status"] == "evidence_missing" and "statistics equal" in rows["embed"]["reason"]
    assert rows["h"]["stats_differ"] is True and rows["h"]["reason"].startswith("candidate: statistics differ")
    fd = an.rounds[0]["first_divergence"]
    assert fd["status"] == "undetermined" and fd["candidate"] == "h"
    assert an.verdict == "evidence_missing" and "collect tensor mode for h" in an.verdict_reason
    assert not [r for r in an.boundary_rows if r["status"] == "EXACT"]
