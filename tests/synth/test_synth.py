"""Tests of the synthetic torch_npu DBs (tilake.synth): schema equals the real files, every foreign
key resolves, counts equal the writers' summaries, variants have their property. Text exports,
profiler_output folders and the generator's CLI: test_synth_files.py."""
from __future__ import annotations

import hashlib
import json

import pytest
from synth_helpers import FIX_DB, ro, table_info, tables

from tilake import synth
from tilake.synth import JobConfig, infer_population, train_population, write_profiler_db
from tilake.synth import db as synth_db
from tilake.synth import tables as synth_ddl

READ_TABLES = ["TASK", "COMPUTE_TASK_INFO", "STRING_IDS", "PYTORCH_API", "CANN_API", "CONNECTION_IDS",
               "PYTORCH_CALLCHAINS", "COMMUNICATION_OP", "SESSION_TIME_INFO", "META_DATA", "ENUM_API_TYPE"]
# columns MindStudio Insight adds to the level-1 fixture when it opens it (reference doc §2.2)
INSIGHT_COLUMNS = {"depth", "waitNs"}
SMALL = JobConfig(layers=2)


@pytest.fixture(scope="module")
def train_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("train") / "ascend_pytorch_profiler_0.db"
    return path, write_profiler_db(path, train_population(SMALL), level="level2", world_size=2)


@pytest.fixture(scope="module")
def infer_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("infer") / "ascend_pytorch_profiler_0.db"
    return path, write_profiler_db(path, infer_population(SMALL))


# --- schema -----------------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["level1", "level2"])
def test_schema_equals_real_fixture(train_db, level):
    fixture = FIX_DB / level / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    if not fixture.exists():
        pytest.skip(f"real fixture not available: {fixture}")
    real, ours = ro(fixture), ro(train_db[0])
    for t in READ_TABLES:
        want = [c for c in table_info(real, t) if c[0] not in INSIGHT_COLUMNS]
        assert table_info(ours, t) == want, t
    assert list(real.execute("SELECT * FROM ENUM_API_TYPE ORDER BY id")) == \
        list(ours.execute("SELECT * FROM ENUM_API_TYPE ORDER BY id"))
    for t in synth_ddl.ENUMS:
        q = f"SELECT * FROM {t} ORDER BY id"
        assert list(real.execute(q)) == list(ours.execute(q)), t
    idx = lambda c: sorted(r for r in c.execute("SELECT name, tbl_name, sql FROM sqlite_master WHERE type='index'"))
    assert idx(ours) == idx(real)


def test_embedded_ddl_matches_fixture_sqlite_master():
    fixture = FIX_DB / "level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    if not fixture.exists():
        pytest.skip(f"real fixture not available: {fixture}")
    real = dict(ro(fixture).execute("SELECT name, sql FROM sqlite_master"))
    for name, sql in synth.ddl().items():
        if name != "MSTX_EVENTS":
            assert real[name] == sql, name
    assert synth.columns_of(synth.ddl()["MSTX_EVENTS"]) == [
        "startNs", "endNs", "eventType", "rangeId", "category", "message", "globalTid", "endGlobalTid", "domainId",
        "connectionId"]


# --- foreign keys and content facts ---------------------------------------------------------------
STRING_FKS = {
    "COMPUTE_TASK_INFO": ["name", "taskType", "opType", "inputFormats", "inputDataTypes", "inputShapes",
                          "outputFormats", "outputDataTypes", "outputShapes", "attrInfo"],
    "TASK": ["taskType"], "CANN_API": ["name"], "PYTORCH_API": ["name", "inputDtypes", "inputShapes"],
    "PYTORCH_CALLCHAINS": ["stack"], "COMMUNICATION_OP": ["opName", "groupName", "algType", "opType"],
    "COMMUNICATION_TASK_INFO": ["name", "taskType", "groupName"], "MSTX_EVENTS": ["message", "domainId"],
    "TASK_PMU_INFO": ["name"],
}


def dangling(con, sql):
    return con.execute(f"SELECT COUNT(*) FROM ({sql})").fetchone()[0]


@pytest.mark.parametrize("which", ["train", "infer"])
def test_every_foreign_key_resolves(train_db, infer_db, which):
    path, _ = train_db if which == "train" else infer_db
    con = ro(path)
    present = tables(con)
    for t, cols in STRING_FKS.items():
        if t not in present:
            continue
        for c in cols:
            assert dangling(con, f"SELECT 1 FROM {t} x WHERE x.{c} IS NOT NULL AND NOT EXISTS "
                                 f"(SELECT 1 FROM STRING_IDS s WHERE s.id = x.{c})") == 0, (t, c)
    assert dangling(con, "SELECT 1 FROM COMPUTE_TASK_INFO c LEFT JOIN TASK t USING (globalTaskId) "
                         "WHERE t.globalTaskId IS NULL") == 0
    # every TASK row hangs off a CANN API, except the PROFILING_ENABLE/DISABLE markers (as in real files)
    assert con.execute("SELECT s.value FROM TASK t JOIN STRING_IDS s ON s.id = t.taskType WHERE NOT EXISTS "
                       "(SELECT 1 FROM CANN_API a WHERE a.connectionId = t.connectionId) ORDER BY 1").fetchall() == \
        [("PROFILING_DISABLE",), ("PROFILING_ENABLE",)]
    # compute kernels hang off the node-level launch API
    assert dangling(con, "SELECT 1 FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId) LEFT JOIN CANN_API a "
                         "ON a.connectionId = t.connectionId AND a.type = 10000 WHERE a.connectionId IS NULL") == 0
    assert dangling(con, "SELECT 1 FROM CONNECTION_IDS ci WHERE NOT EXISTS (SELECT 1 FROM PYTORCH_API p "
                         "WHERE p.connectionId = ci.id)") == 0
    assert dangling(con, "SELECT 1 FROM PYTORCH_API p WHERE p.callchainId IS NOT NULL AND NOT EXISTS "
                         "(SELECT 1 FROM PYTORCH_CALLCHAINS c WHERE c.id = p.callchainId)") == 0
    assert dangling(con, "SELECT 1 FROM PYTORCH_API p WHERE p.type NOT IN (SELECT id FROM ENUM_API_TYPE)") == 0
    assert dangling(con, "SELECT 1 FROM CANN_API a WHERE a.type NOT IN (SELECT id FROM ENUM_API_TYPE)") == 0
    if "COMMUNICATION_OP" in present:
        assert dangling(con, "SELECT 1 FROM COMMUNICATION_TASK_INFO m WHERE m.opId NOT IN "
                             "(SELECT opId FROM COMMUNICATION_OP)") == 0
        assert dangling(con, "SELECT 1 FROM COMMUNICATION_OP o WHERE o.connectionId NOT IN "
                             "(SELECT connectionId FROM CANN_API WHERE type = 10000)") == 0


def test_real_file_quirks(train_db):
    con = ro(train_db[0])
    assert con.execute("SELECT DISTINCT typeof(startNs), typeof(endNs) FROM PYTORCH_API").fetchall() == \
        [("text", "text")]
    # the real swap: inputDtypes holds shapes, inputShapes holds dtypes
    shapes, dtypes = con.execute(
        "SELECT a.value, b.value FROM PYTORCH_API p JOIN STRING_IDS a ON a.id = p.inputDtypes "
        "JOIN STRING_IDS b ON b.id = p.inputShapes JOIN STRING_IDS n ON n.id = p.name "
        "WHERE n.value = 'aten::mm' LIMIT 1").fetchone()
    assert shapes == "513,1024;\r\n1024,4096"
    assert dtypes == "c10::BFloat16;\r\nc10::BFloat16"
    assert con.execute("SELECT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.inputShapes "
                       "JOIN STRING_IDS n ON n.id = c.name WHERE n.value = 'aclnnMm_MatMulCommon_MatMulV2' "
                       "LIMIT 1").fetchone()[0] == '"513,1024;1024,4096"'
    cann_ids = [r[0] for r in con.execute("SELECT id FROM STRING_IDS WHERE id < 268435456 ORDER BY id")]
    assert cann_ids == list(range(len(cann_ids)))
    fwk = con.execute("SELECT MIN(id) FROM STRING_IDS WHERE id >= 268435456").fetchone()[0]
    assert fwk == 1 << 28
    assert con.execute("SELECT DISTINCT contextId, modelId FROM TASK").fetchall() == [(4294967295, 4294967295)]
    non_kernel = {r[0] for r in con.execute(
        "SELECT s.value FROM TASK t JOIN STRING_IDS s ON s.id = t.taskType WHERE t.globalTaskId NOT IN "
        "(SELECT globalTaskId FROM COMPUTE_TASK_INFO)")}
    assert {"MEMCPY_ASYNC", "EVENT_RECORD", "PROFILING_ENABLE", "SDMA", "Notify Wait"} <= non_kernel
    assert con.execute("SELECT s.value, o.count FROM COMMUNICATION_OP o JOIN STRING_IDS s ON s.id = o.opName "
                       "ORDER BY o.opId LIMIT 1").fetchone()[0] == "hcom_allReduce__865_0_1"
    assert {r[0] for r in con.execute("SELECT s.value FROM COMMUNICATION_OP o JOIN STRING_IDS s ON s.id = o.opType")} \
        == {"hcom_allReduce_"}
    assert [r[0] for r in con.execute("SELECT s.value FROM MSTX_EVENTS m JOIN STRING_IDS s ON s.id = m.message "
                                      "WHERE m.eventType = 2 ORDER BY m.startNs")] == \
        ["generate_sequences", "compute_ref_log_prob", "compute_log_prob", "update_actor"]
    frame = con.execute("SELECT s.value FROM PYTORCH_CALLCHAINS c JOIN STRING_IDS s ON s.id = c.stack "
                        "WHERE c.stackDepth = 0 LIMIT 1").fetchone()[0]
    assert frame.endswith("): forward") and ".py(" in frame
    meta = dict(con.execute("SELECT name, value FROM META_DATA"))
    assert meta["SCHEMA_VERSION"] == "1.0.0"
    assert json.loads(meta["parallel_group_info"])[synth_db.HCCL_GROUP]["global_ranks"] == [0, 1]
    assert con.execute("SELECT * FROM RANK_DEVICE_MAP").fetchall() == [(0, 0)]
    assert con.execute("SELECT COUNT(*) FROM STEP_TIME").fetchone()[0] == 1
    (start, end), = con.execute("SELECT * FROM SESSION_TIME_INFO")
    assert con.execute("SELECT MIN(startNs) >= ?, MAX(endNs) <= ? FROM TASK", (start, end)).fetchone() == (1, 1)


def op_type_counts_sql(con):
    return dict(con.execute("SELECT s.value, COUNT(*) FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType "
                            "GROUP BY 1"))


@pytest.mark.parametrize("which", ["train", "infer"])
def test_counts_match_summary(train_db, infer_db, which):
    path, s = train_db if which == "train" else infer_db
    con = ro(path)
    pop = train_population(SMALL) if which == "train" else infer_population(SMALL)
    assert con.execute("SELECT COUNT(*) FROM COMPUTE_TASK_INFO").fetchone()[0] == s["compute_kernels"] == \
        pop.compute_kernel_count()
    comm = con.execute("SELECT COUNT(*) FROM COMMUNICATION_OP").fetchone()[0] if which == "train" else 0
    assert comm == s["communication_ops"] == pop.communication_op_count()
    want = dict(pop.op_type_counts(include_communication=False))
    assert op_type_counts_sql(con) == want
    assert {k: v for k, v in s["op_type_counts"].items() if k != "hcom_allReduce_"} == want
    assert con.execute("SELECT COUNT(*) FROM PYTORCH_API WHERE type = 50001").fetchone()[0] == s["host_ops"]
    for t, n in s["table_rows"].items():
        if t in tables(con):
            assert con.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] == n, t
    linked = con.execute(
        "SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId) WHERE t.connectionId IN "
        "(SELECT ci.connectionId FROM CONNECTION_IDS ci JOIN PYTORCH_API p ON p.connectionId = ci.id "
        "AND p.type = 50001)").fetchone()[0]
    unlinked = s["compute_kernels"] - linked
    assert unlinked == s["unlinked_kernels"] == (16 if which == "infer" else 0)   # _triton_rope: 2 layers × 8 steps


def test_reference_job_counts_follow_structure():
    t, i = train_population().op_type_counts(), infer_population().op_type_counts()
    assert (t["FlashAttentionScore"], t["FlashAttentionScoreGrad"], t["RmsNorm"]) == (672, 224, 2712)
    assert (t["RotaryMul"], t["RotaryMulGrad"], t["SwiGlu"], t["SwiGluGrad"]) == (1344, 448, 672, 224)
    assert t["ApplyAdamW"] == t["LpNormReduceV2"] == t["LpNormUpdateV2"] == 8 * 28 + 2
    assert t["hcom_allReduce_"] == 4 and t["TransData"] >= 1 and t["MatMulV3"] == 8 * (4 * 28 + 1)
    assert (i["FusedInferAttentionScore"], i["AddRmsNormBias"], i["_triton_rope"]) == (224, 448, 224)
    assert (i["RmsNorm"], i["ReshapeAndCacheNdKernel"], i["SwiGlu"]) == (8 * (2 * 28 + 1), 224, 224)
    for op in ("ArgMaxV2", "ApplyTopKTopP", "Sort", "DSARandomUniform", "SoftmaxV2"):
        assert i[op] == 8
    assert "FlashAttentionScore" not in i and "FusedInferAttentionScore" not in t
    accs = {k.accelerator for k in train_population().kernels()} | {k.accelerator for k in infer_population().kernels()}
    assert {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "COMMUNICATION"} <= accs


def test_population_edits_land_in_the_db(tmp_path):
    pop = infer_population(SMALL)
    n = pop.replace_op_type("FusedInferAttentionScore", ["BatchMatMulV2", "SoftmaxV2", "BatchMatMulV2"])
    assert n == 16
    train = train_population(SMALL)
    assert train.replace_op_type("RotaryMul", ["Sin", "Cos"]) == 2 * 2 * 24
    assert train.drop_op_type("RotaryMulGrad") == 2 * 2 * 8
    s = write_profiler_db(tmp_path / "i.db", pop)
    got = op_type_counts_sql(ro(tmp_path / "i.db"))
    assert "FusedInferAttentionScore" not in got and got["BatchMatMulV2"] == 32 and got["SoftmaxV2"] == 16 + 8
    assert s["op_type_counts"] == got
    s2 = write_profiler_db(tmp_path / "t.db", train)
    got2 = op_type_counts_sql(ro(tmp_path / "t.db"))
    assert got2["Sin"] == got2["Cos"] == 96 and "RotaryMul" not in got2 and "RotaryMulGrad" not in got2
    assert s2["compute_kernels"] == sum(got2.values())


def test_attribution_probe_uses_connection_ids(train_db):
    path, s = train_db
    con = ro(path)
    probes = s["probes"]
    def kernels_of(rowid):
        return [r[0] for r in con.execute(
            "SELECT n.value FROM PYTORCH_API p JOIN CONNECTION_IDS ci ON ci.id = p.connectionId "
            "JOIN TASK t ON t.connectionId = ci.connectionId "
            "JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId "
            "JOIN STRING_IDS n ON n.id = c.name WHERE p.rowid = ? ORDER BY t.globalTaskId", (rowid,))]
    assert kernels_of(probes["zero_kernels"]["pytorch_api_rowid"]) == []
    assert kernels_of(probes["three_kernels"]["pytorch_api_rowid"]) == \
        ["aclnnMm_TransData_TransData", "aclnnMm_CastAiCore_Cast", "aclnnMm_MatMulCommon_MatMulV2"]
    g = probes["three_kernels"]["global_task_ids"]
    rows = [r[0] for r in con.execute("SELECT globalTaskId FROM TASK ORDER BY rowid")]
    pos = [rows.index(x) for x in g]
    assert pos == sorted(pos, reverse=True)                    # inserted in reverse
    assert rows[pos[-1] - 1] == g[-1] + 1                     # after a task of the following host op
    assert rows != sorted(rows)


# --- variants ---------------------------------------------------------------------------------------
def test_level0_only_names_are_informative(tmp_path):
    s = write_profiler_db(tmp_path / "l0.db", infer_population(SMALL), level="level0")
    con = ro(tmp_path / "l0.db")
    cols = ["taskType", "opType", "inputFormats", "inputDataTypes", "inputShapes", "outputFormats",
            "outputDataTypes", "outputShapes", "attrInfo"]
    for c in cols:
        assert con.execute(f"SELECT DISTINCT s.value FROM COMPUTE_TASK_INFO x JOIN STRING_IDS s ON s.id = x.{c}"
                           ).fetchall() == [("N/A",)], c
    assert con.execute("SELECT DISTINCT blockDim, mixBlockDim FROM COMPUTE_TASK_INFO").fetchall() == [(0, 0)]
    assert "TASK_PMU_INFO" not in tables(con)
    names = {r[0] for r in con.execute("SELECT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.name")}
    assert "aclnnMm_MatMulCommon_MatMulV2" in names and s["level"] == "level0"


def test_wal_header_and_no_side_files(tmp_path):
    p = tmp_path / "w" / "ascend_pytorch_profiler_0.db"
    write_profiler_db(p, infer_population(SMALL), wal=True)
    assert p.read_bytes()[18:20] == b"\x02\x02"
    assert sorted(x.name for x in p.parent.iterdir()) == ["ascend_pytorch_profiler_0.db"]
    q = tmp_path / "d.db"
    write_profiler_db(q, infer_population(SMALL))
    assert q.read_bytes()[18:20] == b"\x01\x01"


@pytest.mark.parametrize("variant,cols", [("blockDim", ["blockDim", "mixBlockDim"]),
                                          ("blockNum", ["blockNum", "mixBlockNum"]), ("block_dim", ["block_dim"])])
def test_block_column_variants(tmp_path, variant, cols):
    write_profiler_db(tmp_path / "b.db", infer_population(SMALL), block_columns=variant)
    names = [c[0] for c in table_info(ro(tmp_path / "b.db"), "COMPUTE_TASK_INFO")]
    assert names[2:2 + len(cols)] == cols and names[2 + len(cols)] == "taskType"
    assert ro(tmp_path / "b.db").execute(f"SELECT MAX({cols[0]}) FROM COMPUTE_TASK_INFO").fetchone()[0] == 48


def test_newer_cann_schema(tmp_path):
    write_profiler_db(tmp_path / "n.db", train_population(SMALL), schema="8.5", block_columns="blockNum")
    con = ro(tmp_path / "n.db")
    names = [c[0] for c in table_info(con, "COMPUTE_TASK_INFO")]
    assert names[-2:] == ["opState", "hf32Eligible"] and "blockNum" in names
    assert con.execute("SELECT name FROM ENUM_API_TYPE WHERE id = 5500").fetchone()[0] == "communication"
    states = con.execute("SELECT DISTINCT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opState")
    assert states.fetchall() == [("dynamic",)]
    assert [c[0] for c in table_info(con, "COMMUNICATION_TASK_INFO")][-2:] == ["isMaster", "bandwidth"]
    assert dict(con.execute("SELECT name, value FROM META_DATA"))["SCHEMA_VERSION"] == "1.2.0"


@pytest.mark.parametrize("mode,value", [("null", None), ("zero", 0)])
def test_session_without_end(tmp_path, mode, value):
    s = write_profiler_db(tmp_path / "s.db", infer_population(SMALL), session_end=mode)
    assert ro(tmp_path / "s.db").execute("SELECT endTimeNs FROM SESSION_TIME_INFO").fetchone()[0] == value
    assert s["session_end_ns"] == value and s["compute_kernels"] > 0


def test_switches_off(tmp_path):
    s = write_profiler_db(tmp_path / "o.db", train_population(SMALL), with_stack=False, with_mstx=False)
    con = ro(tmp_path / "o.db")
    assert not {"PYTORCH_CALLCHAINS", "MSTX_EVENTS"} & tables(con)
    assert con.execute("SELECT COUNT(*) FROM PYTORCH_API WHERE callchainId IS NOT NULL").fetchone()[0] == 0
    assert s["mstx_ranges"] == [] and s["table_rows"]["PYTORCH_CALLCHAINS"] == 0


def test_empty_device_tables_and_missing_compute_table(tmp_path):
    s = write_profiler_db(tmp_path / "e.db", train_population(SMALL), device_tables="empty")
    con = ro(tmp_path / "e.db")
    assert {"TASK", "COMPUTE_TASK_INFO"} <= tables(con)
    both = "SELECT (SELECT COUNT(*) FROM TASK), (SELECT COUNT(*) FROM COMPUTE_TASK_INFO)"
    assert con.execute(both).fetchone() == (0, 0)
    assert con.execute("SELECT COUNT(*) FROM PYTORCH_API").fetchone()[0] > 1000
    assert con.execute("SELECT COUNT(*) FROM CANN_API").fetchone()[0] > 1000
    assert s["kernels"] == 0 and s["host_ops"] > 0
    s = write_profiler_db(tmp_path / "n.db", train_population(SMALL), device_tables="no_compute_table")
    con = ro(tmp_path / "n.db")
    assert "COMPUTE_TASK_INFO" not in tables(con) and con.execute("SELECT COUNT(*) FROM TASK").fetchone()[0] > 1000
    assert s["compute_kernels"] == 0


def test_same_seed_byte_identical(tmp_path):
    a = write_profiler_db(tmp_path / "a.db", train_population(SMALL), seed=7)
    write_profiler_db(tmp_path / "b.db", train_population(SMALL), seed=7)
    write_profiler_db(tmp_path / "c.db", train_population(SMALL), seed=8)
    h = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()
    assert h(tmp_path / "a.db") == h(tmp_path / "b.db") != h(tmp_path / "c.db")
    assert a["session_start_ns"] == synth.DEFAULT_START_NS


def test_mstx_ranges_cover_their_kernels(train_db):
    con = ro(train_db[0])
    ranges = con.execute("SELECT s.value, m.startNs, m.endNs FROM MSTX_EVENTS m JOIN STRING_IDS s ON s.id = m.message "
                         "ORDER BY m.startNs").fetchall()
    assert all(a[2] <= b[1] for a, b in zip(ranges, ranges[1:]))          # ordered, not overlapping
    per_phase = dict(con.execute(
        "SELECT s.value, COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t USING (globalTaskId) JOIN MSTX_EVENTS m "
        "ON t.startNs BETWEEN m.startNs AND m.endNs JOIN STRING_IDS s ON s.id = m.message GROUP BY 1"))
    pop = train_population(SMALL)
    want = {}
    for op in pop.ops:
        for k in op.kernels:
            if k.accelerator != "COMMUNICATION":
                want[op.phase] = want.get(op.phase, 0) + 1
    assert per_phase == want and "generate_sequences" not in per_phase
