"""The same generated models dumped by the real msprobe (mindstudio-probe), including a stub round via
msprobe's own ``load`` setting fed by ``tilake dumps stub-prepare``.

Runs when a Python with ``msprobe`` and ``torch`` importable is available: the current interpreter, or
``$TILAKE_MSPROBE_PYTHON`` (e.g. a separate venv with ``pip install mindstudio-probe`` plus a ``.pth``
pointing at this venv's site-packages for torch). Skipped otherwise: mindstudio-probe pulls pandas, scipy,
scikit-learn, onnx and tensorboard, so it is not a test dependency.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from click.testing import CliRunner
from msprobe_python import PY, requires_msprobe

from tilake.cli import main

GEN = Path(__file__).resolve().parents[1] / "fixtures" / "msprobe_writer.py"


pytestmark = requires_msprobe


def dump(side, out, fault="-", config=None, cfg=None):
    args = [PY, str(GEN), side, str(out), fault, str(config) if config else "-"] + ([json.dumps(cfg)] if cfg else [])
    p = subprocess.run(args, capture_output=True, text=True, cwd=str(out.parent))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]


def test_real_msprobe_pair_and_stub_round_through_load(tmp_path):
    dump("train", tmp_path / "train")
    dump("infer", tmp_path / "clean")
    dump("infer", tmp_path / "wr", "weight_row")
    run = CliRunner()
    r = run.invoke(main, ["dumps", "analyze", "--train", str(tmp_path / "train"), "--infer", str(tmp_path / "clean"),
                          "--out", str(tmp_path / "o_clean"), "--no-charts"])
    assert r.exit_code == 0, r.output
    src = json.loads((tmp_path / "o_clean" / "report_source.json").read_text())
    assert src["results"]["verdict"] == "exact" and src["summary"]["counts_round0"] == {"EXACT": 35}
    r = run.invoke(main, ["dumps", "analyze", "--train", str(tmp_path / "train"), "--infer", str(tmp_path / "wr"),
                          "--out", str(tmp_path / "o0"), "--no-charts"])
    assert r.exit_code == 0, r.output
    src = json.loads((tmp_path / "o0" / "report_source.json").read_text())
    assert src["first_divergence"]["boundary"] == "L1.gate_proj.out" and src["logic_level_points"] == ["L1.gate_proj.out"]
    r = run.invoke(main, ["dumps", "stub-prepare", "--train", str(tmp_path / "train"), "--infer", str(tmp_path / "wr"),
                          "--instruction", str(tmp_path / "o0" / "stub_instruction.json"), "--out", str(tmp_path / "s1")])
    assert r.exit_code == 0, r.output
    dump("infer", tmp_path / "wr_r1", "weight_row", tmp_path / "s1" / "msprobe_config.json")
    r = run.invoke(main, ["dumps", "analyze", "--train", str(tmp_path / "train"), "--infer", str(tmp_path / "wr"),
                          "--round", str(tmp_path / "train"), str(tmp_path / "wr_r1"),
                          "--out", str(tmp_path / "o1"), "--no-charts"])
    assert r.exit_code == 0, r.output
    src = json.loads((tmp_path / "o1" / "report_source.json").read_text())
    assert [x["outcome"] for x in src["rounds"]] == ["stub_needed", "downstream_all_exact"]
    assert src["rounds"][1]["stub_verification"]["effective"] is True
    assert [p["boundary"] for p in src["points"]] == ["L1.gate_proj.out"]


def test_real_msprobe_stub_rounds_run_to_the_end_on_a_clean_fused_norm_pair(tmp_path):
    """HF eager attention vs a vLLM-style side whose fused add+RMSNorm normalises the unrounded fp32 sum,
    both dumped by the real msprobe; every round applies the stub through msprobe's own ``load``
    (``tilake dumps stub-prepare``) until every remaining difference is an isolated rounding point:
    6 independent points, one per fused norm (4) and one per layer's eager attention (2)."""
    import msprobe_writer as G

    cfg = {"train_attn": "eager", "infer_add_norm": "fp32"}
    dump("train", tmp_path / "train", cfg=cfg)
    dump("infer", tmp_path / "r0", cfg=cfg)
    run = CliRunner()
    rounds: list = []
    for k in range(1, 9):
        r = run.invoke(main, ["dumps", "analyze", "--train", str(tmp_path / "train"), "--infer", str(tmp_path / "r0"),
                              *rounds, "--out", str(tmp_path / f"o{k}"), "--no-charts"])
        assert r.exit_code == 0, r.output
        instr = json.loads((tmp_path / f"o{k}" / "stub_instruction.json").read_text())
        if not instr.get("needed"):
            break
        r = run.invoke(main, ["dumps", "stub-prepare", "--train", str(tmp_path / "train"), "--infer",
                              str(tmp_path / "r0"), "--instruction", str(tmp_path / f"o{k}" / "stub_instruction.json"),
                              "--out", str(tmp_path / f"s{k}")])
        assert r.exit_code == 0, r.output
        dump("infer", tmp_path / f"r{k}", config=tmp_path / f"s{k}" / "msprobe_config.json", cfg=cfg)
        rounds += ["--round", str(tmp_path / "train"), str(tmp_path / f"r{k}")]
    src = json.loads((tmp_path / f"o{k}" / "report_source.json").read_text())
    assert [(p["round"], p["boundary"]) for p in src["points"]] == G.EAGER_FP32_ADD_NORM_POINTS
    assert {p["class"] for p in src["points"]} == {"rounding-level"}
    assert [x["outcome"] for x in src["rounds"]] == ["stub_needed"] * 6 + ["downstream_all_exact"]
    assert all(x["stub_verification"]["effective"] for x in src["rounds"][1:])
    assert src["results"]["verdict"] == "nonzero" and src["results"]["consistency"] == "rounding_only"
