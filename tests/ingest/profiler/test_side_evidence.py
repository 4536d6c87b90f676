"""The side-evidence rule has one home (tilake.ingest.profiler.evidence); dbt's int_sides_evidenced reads
the decision ingest recorded in runs.rl_config._evidence instead of deriving it again."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tilake.ingest.profiler.evidence import SideEvidence, side_evidence

SQL = Path(__file__).resolve().parents[3] / "dbt_project" / "models" / "intermediate" / "op_diff" / "int_sides_evidenced.sql"


def _cap(side, status, evidence="", reason="", path="/p/x.db"):
    return SimpleNamespace(capture=SimpleNamespace(side=side, path=Path(path)), status=status, evidence=evidence,
                           reason=reason)


def test_best_capture_decides_the_side():
    caps = [_cap("train", "host_fallback"), _cap("train", "ok", "cpu_ops"), _cap("infer", "ok", "cpu_ops"),
            _cap("infer", "ok", "device"), _cap("train", "evidence_missing", reason="no kernels")]
    assert side_evidence("train", caps) == SideEvidence("train", "cpu_ops", "")
    assert side_evidence("infer", caps).evidence == "device"
    assert side_evidence("train", [_cap("train", "host_fallback")]).evidence == "host_fallback"


def test_a_side_without_a_usable_capture_says_why():
    caps = [_cap("infer", "unparsed", reason="raw folder: run analyse()", path="/p/i_ascend_pt"),
            _cap("infer", "evidence_missing", reason="no kernels")]
    ev = side_evidence("infer", caps)
    assert ev.missing and ev.reason == "/p/i_ascend_pt: raw folder: run analyse()"
    assert side_evidence("train", caps) == SideEvidence("train", "evidence_missing", "no train capture was found")


def test_dbt_reads_the_recorded_decision():
    sql = SQL.read_text(encoding="utf-8")
    assert "$._evidence.side_evidence." in sql
    # the old second copy of the rule (capture statuses and cpu_only variants) is gone
    assert "'device'" not in sql and "cpu_only" not in sql
