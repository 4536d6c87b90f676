"""One vocabulary (#22): the grade names, ``evidence_missing`` and the boundary statuses of the dump analysis
(``EXACT``, ``NOT_EXACT``, …) are spelled as Python literals only in ``tilake/vocab.py``; every other module
says ``Grade.RED``, ``Evidence.MISSING``, ``BoundaryStatus.EXACT``, … (SQL models, seeds, jinja templates and
the labels file keep the words as text). The scan reads every .py file of the package except tests.

A rich/terminal colour (``style="red"``, ``border_style="red"``, an assignment to ``style``) is a colour
name, not a grade, and is not counted.
"""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from tilake import vocab
from tilake.vocab import BoundaryStatus, CaptureStatus, Evidence, ExitCode, Grade, Verdict, grade_look, grade_looks

ROOT = Path(vocab.__file__).resolve().parent
# red … evidence_missing, EXACT … not_compared
WORDS = {g.value for g in Grade} | {s.value for s in BoundaryStatus}
SKIP_DIRS = {"tests", ".pyroot", ".venv", "build", "dist"}
STYLE_NAMES = ("style", "border_style", "colour", "color")


def package_files():
    for p in sorted(ROOT.rglob("*.py")):
        rel = p.relative_to(ROOT)
        if rel.parts[0] in SKIP_DIRS or any(part.startswith(".") for part in rel.parts) or rel == Path("vocab.py"):
            continue
        yield p, rel


def _style_constants(tree: ast.AST) -> set:
    """ids of constants that are a terminal style (keyword ``style=``/``border_style=`` or ``style = …``)."""
    out = set()
    for node in ast.walk(tree):
        values = []
        if isinstance(node, ast.keyword) and node.arg in STYLE_NAMES:
            values = [node.value]
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in STYLE_NAMES
                                                  for t in node.targets):
            values = [node.value]
        for v in values:
            out |= {id(n) for n in ast.walk(v) if isinstance(n, ast.Constant)}
    return out


def vocabulary_literals(source: str):
    """(line, word) of every string constant that is exactly a grade name, ``evidence_missing`` or a boundary status."""
    tree = ast.parse(source)
    styles = _style_constants(tree)
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in WORDS and id(n) not in styles]


def test_the_scan_sees_literals():
    """The detector itself: a literal is found, a style colour and a longer text are not."""
    src = ('x = "evidence_missing"\nif g == "red": pass\nprint("a", style="red")\nstyle = "green" if x else "red"\n'
           'y = "red herring"\nz = f"{g} evidence_missing"\nw = r["status"] == "NOT_EXACT"\n')
    assert vocabulary_literals(src) == [(1, "evidence_missing"), (2, "red"), (7, "NOT_EXACT")]


def test_no_vocabulary_literal_outside_vocab():
    files = list(package_files())
    assert len(files) > 50   # the scan reached the package
    found = [f"{rel}:{line}: {word!r}" for p, rel in files
             for line, word in vocabulary_literals(p.read_text(encoding="utf-8"))]
    assert not found, "use tilake.vocab members instead of these literals:\n" + "\n".join(found)


def test_members_are_their_text():
    """Lake columns keep their text values: a member equals, hashes, formats, reprs and serialises as its text."""
    for m in (Grade.RED, Evidence.MISSING, CaptureStatus.OK, BoundaryStatus.NOT_EXACT, Verdict.NOT_RUN):
        t = m.value
        assert m == t and hash(m) == hash(t) and {t: 1}[m] == 1
        assert str(m) == f"{m}" == "%s" % m == t and f"{m:>20}" == f"{t:>20}" and repr(m) == repr(t)
        assert json.dumps({m: [m]}) == json.dumps({t: [t]})
    assert f"{ExitCode.EVIDENCE_MISSING}" == str(ExitCode.EVIDENCE_MISSING) == "3" and ExitCode.BAD_INPUT == 2


def test_grade_looks_are_the_seed():
    looks = grade_looks()
    assert list(looks) == [g.value for g in Grade]   # the seed lists every grade, severity order
    assert looks[Grade.RED].emoji == "🔴" and looks[Grade.RED].label("zh") == "高差异"
    assert looks[Grade.YELLOW].color == "gold" and looks[Grade.EVIDENCE_MISSING].severity_rank == 0
    assert grade_look("no-such-grade") == looks[Grade.EVIDENCE_MISSING]


@pytest.mark.parametrize("grade", [g.value for g in Grade])
def test_each_grade_is_a_seed_row(grade):
    assert grade in grade_looks()


def test_phases_are_the_seed_phases():
    """Every phase and pass of ``seeds/phase_rules.csv`` is a member (and the run-facts side lists use them)."""
    import csv

    from tilake.ingest.run_facts import PHASES
    from tilake.vocab import Pass, Phase

    with (ROOT / "dbt_project" / "seeds" / "phase_rules.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["phase"] for r in rows} <= {p.value for p in Phase}
    assert {r["pass"] for r in rows if r["pass"]} <= {p.value for p in Pass}
    assert set(PHASES["train"]) | set(PHASES["infer"]) == {p.value for p in Phase} - {"all"}


def test_labels_file_is_complete():
    """The one labels file: every entry has zh and en text, every label key the code asks for exists, and the
    palette covers exactly the seed's grades."""
    import re

    from tilake.reports import labels as L

    data = L._labels()
    assert list(L.grade_palette()) == list(grade_looks())
    for key, e in data["labels"].items():
        assert set(e) == {"zh", "en"} and all(isinstance(v, str) and v for v in e.values()), key
    used = set()
    for p, _rel in package_files():
        used |= set(re.findall(r"""(?:label|both|words)\(\s*f?["']([a-z_.]+)["']""", p.read_text(encoding="utf-8")))
    for t in (ROOT / "reports" / "templates").glob("*.j2"):
        used |= set(re.findall(r"""words\(\s*'([a-z_.]+)'""", t.read_text(encoding="utf-8")))
    assert used and all(k in data["labels"] or k.endswith(".") for k in used), sorted(used - set(data["labels"]))
