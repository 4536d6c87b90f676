"""DDL and fixed enum contents of real ``ascend_pytorch_profiler_{rank}.db`` files, embedded.

Source of every statement: ``sqlite_master`` of the real torch_npu level-2 fixture
``shared/fixtures/profiler/msinsight/test/data/pytorch/db/level2/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/
ascend_pytorch_profiler_0.db`` (collected 2025-01-09, CANN 8.0-era msprof, META_DATA schema 1.0.0),
copied verbatim (SQLite stores the statement without ``IF NOT EXISTS``; CANN tables are written
``(a INTEGER,b INTEGER)``, torch_npu tables ``(a INTEGER, b INTEGER)`` — kept as-is).
``MSTX_EVENTS`` is absent from that fixture (``msprof_tx`` was off); its columns come from msprof
``analysis/csrc/viewer/database/finals/msprof_db.cpp`` (reference doc §2.2), written in the CANN style.
Version deltas (reference doc §2.5): ``COMPUTE_TASK_INFO.block_dim`` (2024-03), ``blockDim/mixBlockDim``
(CANN 8.x), ``blockNum/mixBlockNum`` (CANN 9.0); ``opState/hf32Eligible`` (2025-06-20);
``COMMUNICATION_TASK_INFO.isMaster`` (2025-01-21) and ``bandwidth`` (2025-08-19);
``COMMUNICATION_OP.deviceId`` (2025-09-18); ENUM_API_TYPE 5500 ``'hccl'`` → ``'communication'`` (2025-02-19).
The module needs nothing under ``/work/shared`` at run time.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

#: DB_INVALID_VALUE of msprof/torch_npu (``DbConstant.DB_INVALID_VALUE``).
INVALID = 4294967295
#: first STRING_IDS id of torch_npu framework strings (``DbConstant.START_STRING_ID_FWK_API``).
FWK_STRING_BASE = 1 << 28

#: schema variants: ``"2025-01"`` = the real fixture; ``"8.5"`` = CANN 8.5-era msprof (schema 1.2.0).
SCHEMAS = ("2025-01", "8.5")
#: COMPUTE_TASK_INFO block columns by variant name.
BLOCK_COLUMNS: Dict[str, Tuple[str, ...]] = {
    "blockDim": ("blockDim", "mixBlockDim"),    # CANN 8.x (real fixture)
    "blockNum": ("blockNum", "mixBlockNum"),    # CANN 9.0 (MindStudio 26.0.0)
    "block_dim": ("block_dim",),                # 2024-03 (CANN 8.0.RC1 first DB export)
}

# --- verbatim from the real fixture's sqlite_master -------------------------------------------
_FIXTURE_DDL: Dict[str, str] = {
    "SESSION_TIME_INFO": "CREATE TABLE SESSION_TIME_INFO (startTimeNs INTEGER,endTimeNs INTEGER)",
    "NPU_INFO": "CREATE TABLE NPU_INFO (id INTEGER,name TEXT)",
    "HOST_INFO": "CREATE TABLE HOST_INFO (hostUid TEXT,hostName TEXT)",
    "ENUM_HCCL_RDMA_TYPE": "CREATE TABLE ENUM_HCCL_RDMA_TYPE (id INTEGER PRIMARY KEY,name TEXT)",
    "COMPUTE_TASK_INFO": "CREATE TABLE COMPUTE_TASK_INFO (name INTEGER,globalTaskId INTEGER PRIMARY KEY,"
                         "blockDim INTEGER,mixBlockDim INTEGER,taskType INTEGER,opType INTEGER,"
                         "inputFormats INTEGER,inputDataTypes INTEGER,inputShapes INTEGER,outputFormats INTEGER,"
                         "outputDataTypes INTEGER,outputShapes INTEGER,attrInfo INTEGER)",
    "ENUM_MSTX_EVENT_TYPE": "CREATE TABLE ENUM_MSTX_EVENT_TYPE (id INTEGER PRIMARY KEY,name TEXT)",
    "ENUM_HCCL_LINK_TYPE": "CREATE TABLE ENUM_HCCL_LINK_TYPE (id INTEGER PRIMARY KEY,name TEXT)",
    "ENUM_HCCL_TRANSPORT_TYPE": "CREATE TABLE ENUM_HCCL_TRANSPORT_TYPE (id INTEGER PRIMARY KEY,name TEXT)",
    "ENUM_HCCL_DATA_TYPE": "CREATE TABLE ENUM_HCCL_DATA_TYPE (id INTEGER PRIMARY KEY,name TEXT)",
    "COMMUNICATION_TASK_INFO": "CREATE TABLE COMMUNICATION_TASK_INFO (name INTEGER,globalTaskId INTEGER,"
                               "taskType INTEGER,planeId INTEGER,groupName INTEGER,notifyId INTEGER,"
                               "rdmaType INTEGER,srcRank INTEGER,dstRank INTEGER,transportType INTEGER,"
                               "size INTEGER,dataType INTEGER,linkType INTEGER,opId INTEGER)",
    "CommunicationTaskIndex": "CREATE INDEX CommunicationTaskIndex ON COMMUNICATION_TASK_INFO (globalTaskId)",
    "ENUM_MODULE": "CREATE TABLE ENUM_MODULE (id INTEGER PRIMARY KEY,name TEXT)",
    "COMMUNICATION_OP": "CREATE TABLE COMMUNICATION_OP (opName INTEGER,startNs INTEGER,endNs INTEGER,"
                        "connectionId INTEGER,groupName INTEGER,opId INTEGER PRIMARY KEY,relay INTEGER,"
                        "retry INTEGER,dataType INTEGER,algType INTEGER,count NUMERIC,opType INTEGER)",
    "ENUM_API_TYPE": "CREATE TABLE ENUM_API_TYPE (id INTEGER PRIMARY KEY,name TEXT)",
    "TASK": "CREATE TABLE TASK (startNs INTEGER,endNs INTEGER,deviceId INTEGER,connectionId INTEGER,"
            "globalTaskId INTEGER,globalPid INTEGER,taskType INTEGER,contextId INTEGER,streamId INTEGER,"
            "taskId INTEGER,modelId INTEGER)",
    "TaskIndex": "CREATE INDEX TaskIndex ON TASK (startNs,globalTaskId)",
    "CANN_API": "CREATE TABLE CANN_API (startNs INTEGER,endNs INTEGER,type INTEGER,globalTid INTEGER,"
                "connectionId INTEGER PRIMARY KEY,name INTEGER)",
    "TASK_PMU_INFO": "CREATE TABLE TASK_PMU_INFO (globalTaskId INTEGER,name INTEGER,value NUMERIC)",
    "META_DATA": "CREATE TABLE META_DATA (name TEXT,value TEXT)",
    "STRING_IDS": "CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY,value TEXT)",
    # torch_npu tables (``TableColumnsManager`` in torch_npu ``prof_common_func/_constant.py``)
    "RANK_DEVICE_MAP": "CREATE TABLE RANK_DEVICE_MAP (rankId INTEGER, deviceId INTEGER)",
    "STEP_TIME": "CREATE TABLE STEP_TIME (id INTEGER, startNs INTEGER, endNs INTEGER)",
    "PYTORCH_API": "CREATE TABLE PYTORCH_API (startNs TEXT, endNs TEXT, globalTid INTEGER, connectionId INTEGER, "
                   "name INTEGER, sequenceNumber INTEGER, fwdThreadId INTEGER, inputDtypes INTEGER, "
                   "inputShapes INTEGER, callchainId INTEGER, type INTEGER)",
    "CONNECTION_IDS": "CREATE TABLE CONNECTION_IDS (id INTEGER, connectionId INTEGER)",
    "PYTORCH_CALLCHAINS": "CREATE TABLE PYTORCH_CALLCHAINS (id INTEGER, stack INTEGER, stackDepth INTEGER)",
}

#: msprof MSTX_EVENTS (reference doc §2.2; not in the fixture), CANN column style.
_MSTX_DDL = ("CREATE TABLE MSTX_EVENTS (startNs INTEGER,endNs INTEGER,eventType INTEGER,rangeId INTEGER,"
             "category INTEGER,message INTEGER,globalTid INTEGER,endGlobalTid INTEGER,domainId INTEGER,"
             "connectionId INTEGER)")

#: Creation order used by the generator (enums and dictionaries first, as msprof does).
TABLE_ORDER: List[str] = [
    "SESSION_TIME_INFO", "NPU_INFO", "HOST_INFO", "ENUM_HCCL_RDMA_TYPE", "COMPUTE_TASK_INFO",
    "ENUM_MSTX_EVENT_TYPE", "ENUM_HCCL_LINK_TYPE", "ENUM_HCCL_TRANSPORT_TYPE", "ENUM_HCCL_DATA_TYPE",
    "COMMUNICATION_TASK_INFO", "ENUM_MODULE", "COMMUNICATION_OP", "ENUM_API_TYPE", "TASK", "CANN_API",
    "MSTX_EVENTS", "TASK_PMU_INFO", "META_DATA", "STRING_IDS", "RANK_DEVICE_MAP", "STEP_TIME",
    "PYTORCH_API", "CONNECTION_IDS", "PYTORCH_CALLCHAINS",
]


def ddl(schema: str = "2025-01", block_columns: str = "blockDim") -> Dict[str, str]:
    """CREATE statements for one schema variant.

    Args:
        schema: ``"2025-01"`` (real fixture) or ``"8.5"`` (adds ``opState, hf32Eligible`` to
            COMPUTE_TASK_INFO, ``isMaster, bandwidth`` to COMMUNICATION_TASK_INFO, ``deviceId`` to
            COMMUNICATION_OP — msprof ``msprof_db.cpp`` history, reference doc §2.5).
        block_columns: ``"blockDim"`` | ``"blockNum"`` | ``"block_dim"`` (see :data:`BLOCK_COLUMNS`).
    Returns:
        ``{table_or_index_name: sql}`` including ``MSTX_EVENTS`` and both indexes.
    Raises:
        ValueError: unknown variant name.
    """
    if schema not in SCHEMAS:
        raise ValueError(f"unknown schema variant {schema!r}; expected one of {SCHEMAS}")
    if block_columns not in BLOCK_COLUMNS:
        raise ValueError(f"unknown block column variant {block_columns!r}; expected one of {tuple(BLOCK_COLUMNS)}")
    out = dict(_FIXTURE_DDL)
    out["MSTX_EVENTS"] = _MSTX_DDL
    cti = out["COMPUTE_TASK_INFO"]
    block_sql = ",".join(f"{c} INTEGER" for c in BLOCK_COLUMNS[block_columns])
    cti = cti.replace("blockDim INTEGER,mixBlockDim INTEGER", block_sql)
    if schema == "8.5":
        cti = cti[:-1] + ",opState INTEGER,hf32Eligible INTEGER)"
        out["COMMUNICATION_TASK_INFO"] = out["COMMUNICATION_TASK_INFO"][:-1] + ",isMaster INTEGER,bandwidth NUMERIC)"
        out["COMMUNICATION_OP"] = out["COMMUNICATION_OP"][:-1] + ",deviceId INTEGER)"
    out["COMPUTE_TASK_INFO"] = cti
    return out


def columns_of(sql: str) -> List[str]:
    """Column names of a ``CREATE TABLE name (col TYPE, ...)`` statement, in order."""
    body = sql[sql.index("(") + 1: sql.rindex(")")]
    return [part.strip().split()[0] for part in body.split(",")]


# --- enum contents (verbatim from the fixture; ENUM_API_TYPE per msprof docs §2.6) -------------
def enum_api_type(schema: str = "2025-01") -> List[Tuple[int, str]]:
    """ENUM_API_TYPE rows; id 5500 is ``'hccl'`` in 2025-01 files, ``'communication'`` later."""
    return [(5000, "runtime"), (5500, "hccl" if schema == "2025-01" else "communication"), (10000, "node"),
            (15000, "model"), (20000, "acl"), (50001, "op"), (50002, "queue"), (50003, "trace"), (50004, "mstx")]


ENUMS: Dict[str, List[Tuple[int, str]]] = {
    "ENUM_MSTX_EVENT_TYPE": [(0, "marker"), (1, "push/pop"), (2, "start/end"), (3, "marker_ex")],
    "ENUM_HCCL_DATA_TYPE": [(0, "INT8"), (1, "INT16"), (2, "INT32"), (3, "FP16"), (4, "FP32"), (5, "INT64"),
                            (6, "UINT64"), (7, "UINT8"), (8, "UINT16"), (9, "UINT32"), (10, "FP64"),
                            (11, "BFP16"), (12, "INT128"), (65534, "N/A"), (65535, "INVALID_TYPE")],
    "ENUM_HCCL_LINK_TYPE": [(0, "ON_CHIP"), (1, "HCCS"), (2, "PCIE"), (3, "ROCE"), (4, "SIO"), (5, "HCCS_SW"),
                            (6, "STANDARD_ROCE"), (7, "RESERVED"), (65534, "N/A"), (65535, "INVALID_TYPE")],
    "ENUM_HCCL_TRANSPORT_TYPE": [(0, "SDMA"), (1, "RDMA"), (2, "LOCAL"), (65534, "N/A"), (65535, "INVALID_TYPE")],
    "ENUM_HCCL_RDMA_TYPE": [(0, "RDMA_SEND_NOTIFY"), (1, "RDMA_SEND_PAYLOAD"), (2, "RDMA_PAYLOAD_PREPARE"),
                            (3, "RDMA_PAYLOAD_CHECK"), (4, "RDMA_PAYLOAD_ACK"), (5, "RDMA_SEND_OP"),
                            (65534, "N/A"), (65535, "INVALID_TYPE")],
    "ENUM_MODULE": list(enumerate([
        "SLOG", "IDEDD", "IDEDH", "HCCL", "FMK", "HIAIENGINE", "DVPP", "RUNTIME", "CCE", "HDC", "DRV", "MDCFUSION",
        "MDCLOCATION", "MDCPERCEPTION", "MDCFSM", "MDCCOMMON", "MDCMONITOR", "MDCBSWP", "MDCDEFAULT", "MDCSC",
        "MDCPNC", "MLL", "DEVMM", "KERNEL", "LIBMEDIA", "CCECPU", "ASCENDDK", "ROS", "HCCP", "ROCE", "TEFUSION",
        "PROFILING", "DP", "APP", "TS", "TSDUMP", "AICPU", "LP", "TDT", "FE", "MD", "MB", "ME", "IMU", "IMP", "GE",
        "MDCFUSA", "CAMERA", "ASCENDCL", "TEEOS", "ISP", "SIS", "HSM", "DSS", "PROCMGR", "BBOX", "AIVECTOR", "TBE",
        "FV", "MDCMAP", "TUNE", "HSS", "FFTS", "OP", "UDF", "HICAID", "TSYNC", "AUDIO", "TPRT", "ASCENDCKERNEL",
        "ASYS", "ATRACE", "RTC", "SYSMONITOR", "AMP", "ADETECT", "MBUFF", "CUSTOM"])),
}

#: ENV_VARIABLES META_DATA value as torch_npu writes it (verbatim from the fixture).
ENV_VARIABLES_JSON = ('{"ASCEND_GLOBAL_LOG_LEVEL": "", "HCCL_RDMA_TC": "", "HCCL_RDMA_SL": "", '
                      '"ACLNN_CACHE_LIMIT": "", "HOST_CACHE_CAPACITY": "", "ASCEND_ENHANCE_ENABLE": "", '
                      '"PYTORCH_NPU_ALLOC_CONF": "", "ASCEND_LAUNCH_BLOCKING": ""}')

# --- text export headers (verbatim from shared/fixtures/.../text/level{0,1,2}/.../*.csv) --------
KERNEL_DETAILS_HEADER_L0 = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                            "Wait Time(us)", "Block Dim"]
KERNEL_DETAILS_HEADER_L1 = [
    "Step Id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
    "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim", "HF32 Eligible",
    "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
    "Context ID", "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio",
    "aic_scalar_time(us)", "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)",
    "aic_mte2_ratio", "aic_fixpipe_time(us)", "aic_fixpipe_ratio", "aic_icache_miss_rate", "aiv_time(us)",
    "aiv_total_cycles", "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio",
    "aiv_mte2_time(us)", "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate",
    "cube_utilization(%)"]
OP_STATISTIC_HEADER = ["OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                       "Max Time(us)", "Ratio(%)"]
API_STATISTIC_HEADER = ["Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
OPERATOR_DETAILS_HEADER = ["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)",
                           "Host Total Duration(us)", "Device Self Duration(us)", "Device Total Duration(us)",
                           "Device Self Duration With AICore(us)", "Device Total Duration With AICore(us)"]
