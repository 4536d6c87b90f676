"""dbt marts over the dump tables: first divergence and independent points in SQL agree with Python."""
from __future__ import annotations

from pathlib import Path

import msprobe_writer as G  # noqa: E402
import pytest

from tilake.diagnosis import analyze as A  # noqa: E402
from tilake.diagnosis import maps as M  # noqa: E402
from tilake.lake.duck import connect  # noqa: E402
from tilake.lake.store import Lake  # noqa: E402
from tilake.lake.warehouse import dbt_build  # noqa: E402
from tilake.pipeline.dumps import DUMP_MODELS, run_analyze  # noqa: E402


def test_marts_match_python(tmp_path):
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    bmap = M.load_map("qwen3_hf_vllm")
    # attention-scale fault through two stub rounds (3 rounds in all)
    G.dump_infer(cfg, tmp_path / "r0", "attn_scale", w=w)
    rounds = [A.RoundInput(tmp_path / "train", tmp_path / "r0")]
    an = A.analyze_pair(rounds, bmap)
    for k in (1, 2):
        instr = an.stub_instruction
        pair = A.Pair(rounds[0].train, rounds[0].infer, bmap)
        A.prepare_stub_source(pair, instr, tmp_path / f"load{k}")
        G.dump_infer(cfg, tmp_path / f"r{k}", "attn_scale", w=w,
                     load={"path": str(tmp_path / f"load{k}"), "modules": instr["msprobe_config"]["load"]["modules"]})
        rounds.append(A.RoundInput(tmp_path / "train", tmp_path / f"r{k}"))
        an = A.analyze_pair(rounds, bmap)
    lake = Lake(tmp_path / "lake")
    # the CLI path: every round, lake write and dbt build of the dump models in one call
    res = run_analyze(rounds[0].train, rounds[0].infer, tmp_path / "out", rounds=[(r.train, r.infer) for r in rounds[1:]],
                      card={"model": "gen"}, lake_path=lake.root, run_id="gen-scale", build=True, charts=False,
                      show_progress=False)
    assert res.lake_rows["tensor_stats"] > 0 and res.lake_rows["stub_rounds"] == 2
    assert res.dbt_nodes and res.points == [(0, "L0.attn_core.out", "logic-level"), (1, "L1.attn_core.out", "logic-level")]
    # the SQL unit tests ran and passed as part of a build
    bres = dbt_build(lake, command="test", select=DUMP_MODELS)
    assert bres.success, bres.failures
    assert {n for n, t, s, _m in bres.nodes if str(t).endswith("unit_test") and s == "pass"} >= {
        "first_divergence_needs_all_predecessors_compared", "difference_point_requires_equal_inputs",
        "first_divergence_in_sql"}
    con = connect(lake.warehouse, read_only=True)
    pts = con.execute("select round, boundary, diff_class from main.fct_difference_points "
                      "where run_id = 'gen-scale' order by point_no").fetchall()
    assert pts == [(p["round"], p["boundary"], p["class"]) for p in an.points] == [
        (0, "L0.attn_core.out", "logic-level"), (1, "L1.attn_core.out", "logic-level")]
    # amplification of each point: the largest max|diff| over the differing boundaries after it in its
    # round, over its own; the mart reads what diagnosis/lake_rows.py wrote
    amp = con.execute("select round, boundary, downstream_differing, amplification from main.fct_difference_points "
                      "where run_id = 'gen-scale' order by point_no").fetchall()
    want = []
    for p in an.points:
        down = [r for r in an.boundary_rows if r["round"] == p["round"] and r["position"] > p["position"]
                and r["status"] in ("NOT_EXACT", "DTYPE_DIFF", "NONFINITE")]
        dmax = max(c["max_abs_diff"] for c in down)
        want.append((p["round"], p["boundary"], len(down), dmax / p["max_abs_diff"]))
    assert [a[:3] for a in amp] == [w[:3] for w in want] and all(w[2] > 0 for w in want)
    assert [a[3] for a in amp] == pytest.approx([w[3] for w in want])
    fd = con.execute("select round, first_divergence, first_divergence_status from main.fct_boundary_diffs "
                     "where run_id = 'gen-scale' group by all order by round").fetchall()
    assert fd == [(0, "L0.attn_core.out", "found"), (1, "L1.attn_core.out", "found"), (2, None, "none")]
    chain = con.execute("select boundary, growth_vs_first from main.fct_boundary_diffs where run_id = 'gen-scale' "
                        "and round = 0 and growth_vs_first is not null order by position").fetchall()
    py = [(c["boundary"], c["growth_vs_first"]) for c in an.rounds[0]["amplification_chain"]]
    assert [c[0] for c in chain] == [c[0] for c in py]
    assert [c[1] for c in chain] == pytest.approx([c[1] for c in py])
    ts = con.execute("select side, round, tensor_slots, tensors_unreadable, dtype_mismatches "
                     "from main.fct_dump_tensor_stats order by side, round").fetchall()
    assert [(s, r) for s, r, *_ in ts] == [("infer", 0), ("infer", 1), ("infer", 2),
                                           ("train", 0), ("train", 1), ("train", 2)]
    assert all(t[3] == 0 and t[4] == 0 for t in ts)
    # the named report queries run against the marts
    qdir = Path(__file__).resolve().parents[2] / "reports" / "queries"
    q = (qdir / "dumps_difference_points.sql").read_text()
    got = con.execute(q, {"run_id": "gen-scale"}).fetchall()
    assert [(r[1], r[2], r[5]) for r in got] == [(0, "L0.attn_core.out", "logic-level"), (1, "L1.attn_core.out", "logic-level")]
    q = (qdir / "dumps_first_divergence.sql").read_text()
    got = con.execute(q, {"run_id": "gen-scale"}).fetchall()
    assert got[0][:3] == (0, "found", "L0.attn_core.out")
    con.close()
