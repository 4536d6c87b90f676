"""The dbt project documents itself: every model, seed, macro and column is described in YAML beside it.

The datasette ``test_docs.py`` idea over dbt's manifest: ``dbt parse`` (in-process, ``dbtRunner``)
returns the manifest as ``.result``; these tests fail on anything undocumented, on sources that
drift from the lake schema (:data:`tilake.lake.schema.TABLES`), on declared columns that differ
from what a build of an empty lake produces, and on files outside the folder = selector layout.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tilake.lake import schema
from tilake.lake.duck import connect
from tilake.lake.store import Lake
from tilake.lake.warehouse import PROJECT_DIR, dbt_build

PKG = "tilake"
# staging folder (= source name) → the raw tables it stages
SOURCES = {"profiler": schema.PROFILE_TABLES, "msprobe": schema.DUMP_TABLES, "alignment": schema.ALIGN_TABLES}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    from dbt.cli.main import dbtRunner

    tmp = tmp_path_factory.mktemp("dbt-parse")
    mp = pytest.MonkeyPatch()
    mp.setenv("TILAKE_LAKE", str(tmp / "lake"))
    mp.setenv("DBT_SEND_ANONYMOUS_USAGE_STATS", "false")
    try:
        res = dbtRunner().invoke(["parse", "--project-dir", str(PROJECT_DIR), "--profiles-dir", str(PROJECT_DIR),
                                  "--target-path", str(tmp / "target"), "--log-path", str(tmp / "logs"), "--quiet"])
    finally:
        mp.undo()
    assert res.success, res.exception
    return res.result


def _ours(items):
    return [n for n in items if n.package_name == PKG]


def test_every_model_and_seed_has_a_grain_description(manifest):
    nodes = _ours(n for n in manifest.nodes.values() if n.resource_type in ("model", "seed"))
    assert len(nodes) > 40
    bad = [n.name for n in nodes if not n.description.strip()]
    assert bad == [], f"models/seeds without a description: {bad}"
    no_grain = [n.name for n in nodes if not n.description.startswith("One row per")]
    assert no_grain == [], f"descriptions must open with the grain ('One row per …'): {no_grain}"


def test_every_declared_column_has_a_description(manifest):
    nodes = _ours(n for n in manifest.nodes.values() if n.resource_type in ("model", "seed"))
    bare = [n.name for n in nodes if not n.columns]
    assert bare == [], f"models/seeds declaring no columns: {bare}"
    bad = [f"{n.name}.{c}" for n in nodes for c, col in n.columns.items() if not col.description.strip()]
    assert bad == [], f"columns without a description: {bad}"


def _signature(macro_sql: str):
    m = re.match(r"\{%-?\s*(?:macro|test)\s+\w+\((.*?)\)\s*-?%\}", macro_sql.strip(), re.S)
    assert m, macro_sql[:80]
    return [a.split("=")[0].strip() for a in m.group(1).split(",") if a.strip()]


def test_every_macro_is_documented_with_typed_arguments(manifest):
    macros = _ours(manifest.macros.values())
    assert len(macros) >= 15
    bad = [m.name for m in macros if not m.description.strip()]
    assert bad == [], f"macros without a description in macros/_macros.yml: {bad}"
    for m in macros:
        assert [a.name for a in m.arguments] == _signature(m.macro_sql), f"{m.name}: arguments differ from the signature"
        for a in m.arguments:
            assert a.type and a.description.strip(), f"{m.name}({a.name}): argument without type or description"


def test_sources_are_the_lake_schema(manifest):
    """sources.yml lists exactly the raw tables and columns (names and types) of tilake.lake.schema."""
    got = {}
    for s in _ours(manifest.sources.values()):
        assert s.description.strip() and all(c.description.strip() for c in s.columns.values()), s.name
        got.setdefault(s.source_name, {})[s.name] = [(c.name, (c.data_type or "").upper()) for c in s.columns.values()]
    assert {k: sorted(v) for k, v in got.items()} == {k: sorted(v) for k, v in SOURCES.items()}
    for src, tables in got.items():
        for t, cols in tables.items():
            assert cols == schema.TABLES[t], f"source {src}.{t} differs from tilake.lake.schema.TABLES"


def test_folder_is_the_selector(manifest):
    """staging/<source>/stg_<source>__*.sql reads only its own source; int_/fct_/dim_ names by layer;
    one YAML per folder, no two with the same file name; no *-paths to a missing folder."""
    for n in _ours(manifest.nodes.values()):
        if n.resource_type != "model":
            continue
        parts = Path(n.original_file_path).parts        # models/<layer>/<area>/<file>
        assert len(parts) == 4, f"{n.original_file_path}: models live in models/<layer>/<area>/"
        layer, area = parts[1], parts[2]
        prefix = {"staging": f"stg_{area}__", "intermediate": "int_", "marts": ("fct_", "dim_")}[layer]
        assert n.name.startswith(prefix), f"{n.name} in {layer}/{area}/"
        srcs = {s[0] for s in n.sources}
        assert srcs == ({area} if layer == "staging" else set()), f"{n.name} reads sources {srcs}"
    ymls = sorted((PROJECT_DIR / "models").rglob("_*.yml"))
    names = [p.name for p in ymls]
    assert len(names) == len(set(names)), names
    for folder in {p.parent for p in (PROJECT_DIR / "models").rglob("*.sql")}:
        assert [p for p in ymls if p.parent == folder], f"{folder} has no YAML beside its models"
    proj = yaml.safe_load((PROJECT_DIR / "dbt_project.yml").read_text(encoding="utf-8"))
    for key, paths in proj.items():
        if key.endswith("-paths"):
            for p in paths:
                assert (PROJECT_DIR / p).is_dir(), f"{key}: {p} does not exist"


def test_declared_columns_are_the_built_columns(tmp_path, manifest):
    """A build of an empty lake produces exactly the columns the YAML declares (names, in order)."""
    lake = Lake(tmp_path / "lake")
    res = dbt_build(lake, progress=False)
    assert res.success, res.failures
    con = connect(lake.warehouse, read_only=True)
    try:
        built = {}
        for t, c in con.execute("select table_name, column_name from information_schema.columns "
                                "where table_schema = 'main' order by table_name, ordinal_position").fetchall():
            built.setdefault(t, []).append(c)
    finally:
        con.close()
    nodes = _ours(n for n in manifest.nodes.values() if n.resource_type in ("model", "seed"))
    diff = {n.name: (list(n.columns), built.get(n.name)) for n in nodes if list(n.columns) != built.get(n.name)}
    assert diff == {}, f"declared vs built columns differ: {diff}"
