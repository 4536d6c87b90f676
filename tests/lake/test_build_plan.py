"""Which nodes a build runs (tilake.lake.warehouse.build_plan): the fast plan only for a warehouse built by
the very project in force, tests only under --check (or a whole build with user rules), docs/lake.md "Builds"."""
from __future__ import annotations

import pytest

from tilake.lake.warehouse import REPLAY_MARKER, _due_list, build_plan

SHA = "a" * 64


@pytest.mark.parametrize("kw,want", [
    ({}, ("fast", False)),                                        # same project: the tables only, no tests
    ({"recorded": None}, ("full", False)),                        # first build: everything, tests left out
    ({"recorded": ""}, ("full", False)),                          # built by plain dbt / a failed build
    ({"recorded": "b" * 64}, ("full", False)),                    # upgraded tilake or edited seeds
    ({"recorded": "b" * 64, "rules": {"dir": "r"}}, ("full", True)),   # new user rules: their rows are tested
    ({"rules": {"dir": "r"}}, ("fast", False)),                   # the same rules as last time
    ({"check": True}, ("full", True)),
    ({"full_refresh": True}, ("full", False)),
    ({"select": ["fct_op_comparison"]}, ("select", False)),
    ({"select": ["fct_op_comparison"], "check": True}, ("select", True)),
    ({"command": "run"}, ("full", True)),                         # other dbt commands run as asked
])
def test_build_plan(kw, want):
    args = {"command": "build", "select": None, "full_refresh": False, "check": False, "recorded": SHA, "sha": SHA,
            "rules": None, **kw}
    assert build_plan(**args) == want


def test_due_runs_replace_the_marker_as_a_quoted_list():
    sql = f"select * from k where run_id in {REPLAY_MARKER}"
    assert sql.replace(REPLAY_MARKER, _due_list(["a", "o'b"])) == "select * from k where run_id in ('a', 'o''b')"
    assert sql.replace(REPLAY_MARKER, _due_list([])) == "select * from k where run_id in (NULL)"   # no row
