"""``tilake dumps gate``: the bitwise acceptance gate (exit 0 only on bitwise-equal or within-budget boundaries,
exit 1 with the first failing boundary in one line, never a pass on missing evidence), its budget file and
its lake row."""
from __future__ import annotations

import copy
import json

import duckdb
import msprobe_writer as G  # noqa: E402
import pytest
import torch
import yaml
from click.testing import CliRunner
from msprobe_mini import write_dump, write_map  # noqa: E402

from tilake.cli import main
from tilake.diagnosis import gate as gate_mod
from tilake.errors import TilakeError
from tilake.lake.gate_records import Budget, BudgetEntry
from tilake.models.boundary_maps import MODELS_DIR


def gate(*args):
    res = CliRunner().invoke(main, ["dumps", "gate", *map(str, args)])
    return res.exit_code, res.stdout.strip(), res.stderr.strip()


@pytest.fixture(scope="module")
def pair_a(shared_dir):
    return shared_dir / "fixtures" / "dumps" / "pairA"


def hf_hf_map(path):
    """The shipped HF ↔ vLLM map with the HF (train) selectors on both sides: two HF dumps compared."""
    m = yaml.safe_load((MODELS_DIR / "qwen3_hf_vllm.yaml").read_text(encoding="utf-8"))
    m["sides"]["infer"] = copy.deepcopy(m["sides"]["train"])
    for key in ("boundaries", "weights"):
        for b in m[key]:
            b["infer"] = copy.deepcopy(b["train"])
            b.pop("reason_missing", None)
    m.pop("moe", None)
    path.write_text(yaml.safe_dump(m), encoding="utf-8")
    return path


def test_rounding_difference_fails_on_the_first_differing_boundary(pair_a):
    rc, out, _ = gate(pair_a / "train", pair_a / "infer")
    assert rc == 1
    assert out.splitlines() == [out]
    assert out.startswith("FAIL L0.attn_core.out: NOT_EXACT, max 50 ULP per element")
    assert "24 of 50 mapped boundaries bitwise equal, 26 fail" in out
    assert "1 not mapped by qwen3_hf_vllm (lm_head.weight)" in out


def test_identical_dumps_pass(pair_a, tmp_path):
    rc, out, _ = gate(pair_a / "train", pair_a / "train", "--map", hf_hf_map(tmp_path / "hf_hf.yaml"))
    assert (rc, out) == (0, "PASS: 51 of 51 mapped boundaries bitwise equal")


def test_clean_generated_pair_in_two_layouts_passes(tmp_path):
    """HF-style training vs vLLM-style inference of the same weights (tests/fixtures/msprobe_writer.py):
    every mapped boundary bitwise equal; vLLM's lm_head.weight is not mapped and is named, not gated."""
    cfg = G.Cfg()
    w = G.weights(cfg)
    G.dump_train(cfg, tmp_path / "train", w)
    G.dump_infer(cfg, tmp_path / "infer", None, w=w)
    rc, out, _ = gate(tmp_path / "train", tmp_path / "infer", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["passed"] is True and doc["outcome"] == "pass"
    assert (doc["mapped"], doc["exact"], doc["not_mapped"]) == (50, 50, 1)
    assert doc["line"].startswith("PASS: 50 of 50 mapped boundaries bitwise equal; 1 not mapped")


def test_uncomparable_boundaries_fail_with_a_count(pair_a):
    """Two HF dumps through the HF ↔ vLLM-style map: no inference-side entry exists, nothing is compared."""
    rc, out, _ = gate(pair_a / "train", pair_a / "train", "--map", "qwen3_hf_vllm")
    assert rc == 1
    assert out.startswith("FAIL embed: not compared (evidence_missing: infer dump has no entry")
    # lm_head.weight, which the map leaves out on the inference side, is found there by its shape (the
    # lm_head-by-shape pitfall check) and compared by value: the one boundary that is bitwise equal
    assert "1 of 51 mapped boundaries bitwise equal, 50 not compared" in out
    assert out.endswith("a gate never passes on missing evidence")
    # --map auto picks the map that resolves most (the real-engine map's class wildcards match HF names on
    # both sides for some boundaries): still never a pass while any mapped boundary is uncompared
    rc, out, _ = gate(pair_a / "train", pair_a / "train")
    assert rc == 1 and "not compared" in out and out.endswith("a gate never passes on missing evidence")


@pytest.fixture()
def one_ulp(tmp_path):
    """Three boundaries: ``same`` equal, ``near`` 1 ULP apart in one bf16 element, ``gone`` absent on the
    inference side on purpose (``infer: null``)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g).to(torch.bfloat16)
    y = torch.randn(8, 16, generator=g).to(torch.bfloat16)
    y1 = y.clone()
    y1.view(torch.int16)[3, 5] += 1   # the next bf16 value: 1 ULP
    ents = lambda yy: [("Module.m.A.Lin.forward.0", None, {"output": [x]}),   # noqa: E731
                       ("Module.m.B.Lin.forward.0", None, {"output": [yy]})]
    write_dump(tmp_path / "train", ents(y) + [("Module.m.C.Lin.forward.0", None, {"output": [x]})])
    write_dump(tmp_path / "infer", ents(y1))
    sel = lambda m: {"module": m, "io": "output", "index": 0}   # noqa: E731
    mp = write_map(tmp_path / "m.yaml", [
        {"name": "same", "op": "matmul", "inputs": [], "train": sel("m.A.Lin"), "infer": sel("m.A.Lin")},
        {"name": "near", "op": "matmul", "inputs": ["same"], "train": sel("m.B.Lin"), "infer": sel("m.B.Lin")},
        {"name": "gone", "op": "matmul", "inputs": [], "train": sel("m.C.Lin"), "infer": None,
         "reason_missing": "not dumped on the inference side"}])
    return tmp_path, mp


def test_budget_lets_a_known_one_ulp_boundary_pass(one_ulp):
    tmp, mp = one_ulp
    base = [tmp / "train", tmp / "infer", "--map", mp]
    rc, out, _ = gate(*base)
    assert rc == 1 and out.startswith("FAIL near: NOT_EXACT, max 1 ULP per element")
    assert "no ULP budget names it" in out
    (tmp / "b1.yaml").write_text("near: 1\n")
    rc, out, _ = gate(*base, "--budget", tmp / "b1.yaml")
    assert (rc, out) == (0, "PASS: 1 of 2 mapped boundaries bitwise equal, 1 within their ULP budget; "
                            "1 not mapped by m (gone)")
    (tmp / "b0.json").write_text('{"ne*": {"max_elem_ulp": 0}}')
    rc, out, _ = gate(*base, "--budget", tmp / "b0.json")
    assert rc == 1 and "beyond budget 'ne*' (per element 1 > 0)" in out
    # an exact name wins over a glob, whatever the order
    (tmp / "b2.yaml").write_text('"*": 0\nnear: 1\ntypo.out: 3\n')
    rc, out, err = gate(*base, "--budget", tmp / "b2.yaml")
    assert rc == 0 and "note: budget entry 'typo.out' matches no boundary" in err


def test_gate_is_recorded_in_the_lake(one_ulp):
    tmp, mp = one_ulp
    lake = tmp / "lake"
    rc, out, _ = gate(tmp / "train", tmp / "infer", "--map", mp, "--run-id", "g1", "--lake", lake, "--out", tmp / "out")
    assert rc == 1
    row = duckdb.sql(f"select * from read_parquet('{lake}/raw/dump_gates/run_id=*/*.parquet', hive_partitioning=true)")
    rec = dict(zip(row.columns, row.fetchone()))
    assert (rec["run_id"], rec["outcome"], rec["passed"], rec["line"]) == ("g1", "fail", False, out)
    assert (rec["mapped"], rec["exact"], rec["failing"], rec["uncompared"], rec["not_mapped"]) == (2, 1, 1, 0, 1)
    assert (rec["first_failing_boundary"], rec["first_failing_max_elem_ulp"]) == ("near", 1.0)
    assert [f["boundary"] for f in json.loads(rec["failures"])] == ["near"]
    assert json.loads((tmp / "out" / "gate.json").read_text())["line"] == out
    assert (tmp / "out" / "report_source.json").is_file()


@pytest.mark.parametrize("text, msg", [
    ("- a\n- b\n", "must be a non-empty mapping"),
    ("near: -1\n", "max_elem_ulp must be a number ≥ 0 (ULP), got -1"),
    ("near: {ulp: 1}\n", "unknown key(s) ulp"),
    ("near: [1\n", "not YAML/JSON text"),
    ("near: .nan\n", "must be a number ≥ 0"),
])
def test_bad_budget_is_one_error_line(one_ulp, text, msg):
    tmp, mp = one_ulp
    (tmp / "bad.yaml").write_text(text)
    rc, out, err = gate(tmp / "train", tmp / "infer", "--map", mp, "--budget", tmp / "bad.yaml")
    assert rc == 2 and out == "" and err.splitlines() == [err] and err.startswith(f"error: {tmp / 'bad.yaml'}: ")
    assert msg in err


def test_budget_precedence_and_limits(tmp_path):
    p = tmp_path / "b.yaml"
    p.write_text('"L*": {tensor_ulp: 2}\n"L0.*": 5\nL0.o_proj.out: {max_elem_ulp: 1, tensor_ulp: 0.5}\n')
    b = gate_mod.read_budget(p)
    assert b.entries[2] == BudgetEntry("L0.o_proj.out", 1.0, 0.5) and len(b.sha256) == 64
    assert gate_mod.budget_for(b, "L0.o_proj.out").pattern == "L0.o_proj.out"
    assert gate_mod.budget_for(b, "L0.q_proj.out").pattern == "L*"     # first glob in file order
    assert gate_mod.budget_for(b, "embed") is None
    assert gate_mod.budget_for(Budget(), "embed") is None
    with pytest.raises(TilakeError, match="cannot read the ULP budget"):
        gate_mod.read_budget(tmp_path / "absent.yaml")


def test_trend_fail_if_fails_a_ci_job_when_the_gate_regresses(one_ulp):
    """Two gated runs (the first passes within its budget, the second fails): the gate_blocking trend went
    0 → 1 against the previous run, so --fail-if regress exits 1; the chart goes under --out only."""
    tmp, mp = one_ulp
    lake, out = tmp / "lake", tmp / "charts"
    (tmp / "b1.yaml").write_text("near: 1\n")
    base = [tmp / "train", tmp / "infer", "--map", mp, "--lake", lake]
    assert gate(*base, "--run-id", "g-pass", "--budget", tmp / "b1.yaml")[0] == 0
    assert gate(*base, "--run-id", "g-fail", "--build")[0] == 1
    trend = ["trend", "-m", "gate_blocking", "--by", "none", "--lake", str(lake)]
    r = CliRunner().invoke(main, trend + ["--fail-if", "regress", "--out", str(out)])
    assert r.exit_code == 1, r.output
    assert "regressed: all runs: gate_blocking 0 → 1 (g-pass → g-fail)" in r.stdout
    assert "--fail-if regress: 1 of 1 series regressed" in r.stdout
    assert (out / "trend_gate_blocking_by_none.png").is_file()
    cwd = tmp / "cwd"
    cwd.mkdir()
    with pytest.MonkeyPatch.context() as mp:   # no --out/--output: no chart file anywhere
        mp.chdir(cwd)
        r = CliRunner().invoke(main, trend)
        assert r.exit_code == 0 and "chart: not written (give --out DIR or --output FILE)" in r.stderr
        assert list(cwd.iterdir()) == []
    r = CliRunner().invoke(main, trend + ["--fail-if", "decrease", "--json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["chart"] is None and doc["fail_if"]["exit_code"] == 0
    r = CliRunner().invoke(main, ["trend", "-m", "first_divergence", "--lake", str(lake), "--fail-if", "regress"])
    assert r.exit_code == 2 and "does not say which way is worse" in r.stderr
    rows = duckdb.connect(str(lake / "warehouse.duckdb"), read_only=True).sql(
        "select run_id, outcome, boundaries_blocking from fct_dump_gates order by run_id").fetchall()
    assert rows == [("g-fail", "fail", 1), ("g-pass", "pass", 0)]


def test_fail_if_without_two_points_is_evidence_missing():
    from tilake.pipeline.trend import check_regression
    from tilake.reports.trends import Series, TrendDef, TrendResult

    td = TrendDef("gate_blocking", MODELS_DIR / "x.sql", "", worse="higher")
    res = TrendResult(td, "none", "run", [Series("all runs", [(1, 0.0, 1, "a")])], "")
    chk = check_regression(res, "regress")
    assert chk.exit_code == 3 and chk.lines[-1].startswith("evidence_missing: no series of gate_blocking has two points")
    res.series[0].points.append((2, 0.0, 1, "b"))
    assert check_regression(res, "increase").exit_code == 0 and check_regression(res, "change").exit_code == 0
    res.series[0].points.append((3, -1.0, 1, "c"))
    assert check_regression(res, "regress").exit_code == 0 and check_regression(res, "decrease").exit_code == 1
