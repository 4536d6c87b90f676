"""SQL fragments shared by the DB and text readers (single source for name-derived op types).

Level-0 captures store ``N/A`` for every op type (reference doc §0.2); the op type is then derived
from the kernel name following the conventions of reference doc §5.1:

* ``aclnn<Api>_<Impl>_<OpType>[_suffix]`` → ``<OpType>`` (``aclnnMm_MatMulCommon_MatMulV2`` → MatMulV2)
* ... except when ``<Impl>`` is ``<Stem>V<n>Common`` (a versioned op type) and ``<OpType>`` is another
  version of the same stem: then ``<Stem>V<n>``. Real row of msprof-analyze's UT data
  (mstt ``compute_advice/data/kernel_details.csv``): ``aclnnMatmul_MatMulV3Common_MatMulV5`` has
  Type ``MatMulV3``; ``aclnnMm_MatMulCommon_MemSet`` stays MemSet (other stem), and
  ``aclnnMm_MatMulCommon_MatMulV2`` stays MatMulV2 (``MatMulCommon`` names no version), as the
  level-1 DB of the same msinsight job records them.
* ``trans_<OpType>_<n>`` → ``<OpType>`` (``trans_TransData_17`` → TransData)
* ``hcom_<coll>__<id>_<n>[_<m>]`` → ``hcom_<coll>_`` (``hcom_allReduce__865_0_1`` → hcom_allReduce_)
* GE names ``<OpType><n>_<Suffix>`` → ``<Suffix>`` (``Conv2DBackpropFilter6_MemSet`` → MemSet)
* GE names ``<OpType><n>`` → ``<OpType>`` (``ReduceSum7`` → ReduceSum)
* anything else (Triton ``_triton_rope``, ATB ``ReshapeAndCacheNdKernel``) → the name itself.
"""
from __future__ import annotations


def derived_op_type(name: str) -> str:
    """SQL expression deriving the CANN op type from the kernel-name expression ``name``."""
    return (
        "CASE"
        f" WHEN regexp_matches({name}, '^hcom_[A-Za-z]+_') THEN regexp_extract({name}, '^(hcom_[A-Za-z]+_)', 1)"
        f" WHEN regexp_matches({name}, '^trans_[A-Za-z0-9]+_[0-9]+$') THEN regexp_extract({name}, '^trans_([A-Za-z0-9]+)_', 1)"
        f" WHEN regexp_matches({name}, '^aclnn[A-Za-z0-9]+_[A-Za-z0-9]+_[A-Za-z0-9]+')"
        f"   THEN {_aclnn_op_type(name)}"
        f" WHEN regexp_matches({name}, '^[A-Z][A-Za-z0-9]*[0-9]+_[A-Za-z][A-Za-z0-9]*$') THEN regexp_extract({name}, '_([A-Za-z0-9]+)$', 1)"
        f" WHEN regexp_matches({name}, '^[A-Z][A-Za-z0-9]*[A-Za-z][0-9]+$') THEN regexp_replace({name}, '[0-9]+$', '')"
        f" ELSE {name} END"
    )


def _aclnn_op_type(name: str) -> str:
    """Op type of an ``aclnn<Api>_<Impl>_<OpType>`` name: the ``<Stem>V<n>Common`` impl family when the
    last segment is another version of that stem, else the last segment (see the module docstring)."""
    last = f"regexp_extract({name}, '^aclnn[A-Za-z0-9]+_[A-Za-z0-9]+_([A-Za-z0-9]+)', 1)"
    common = "'^aclnn[A-Za-z0-9]+_(([A-Za-z0-9]+)V[0-9]+)Common_'"
    return (f"CASE WHEN regexp_matches({name}, {common})"
            f" AND starts_with({last}, regexp_extract({name}, {common}, 2))"
            f" THEN regexp_extract({name}, {common}, 1) ELSE {last} END")


def op_type_or_derived(op_type: str, name: str) -> str:
    """``op_type`` unless it is NULL/empty/``N/A``, else the name-derived op type."""
    return (f"CASE WHEN {op_type} IS NULL OR trim({op_type}) IN ('', 'N/A') "
            f"THEN {derived_op_type(name)} ELSE {op_type} END")


def is_derived(op_type: str) -> str:
    """SQL boolean: the op type had to be derived from the name."""
    return f"({op_type} IS NULL OR trim({op_type}) IN ('', 'N/A'))"


def clean_text(expr: str) -> str:
    """Strip the literal double quotes profiler strings carry (``"32,3,224,224"``) and CR/LF; N/A → NULL."""
    return f"nullif(nullif(trim(regexp_replace({expr}, '[\"\\r\\n]', '', 'g')), 'N/A'), '')"
