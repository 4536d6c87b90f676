"""The documentation is complete and true (datasette's ``tests/test_docs.py`` idea).

* Every click command and option, every ``TILAKE_*`` name of ``settings.py`` and every mart of
  ``dbt_project/models/marts/`` has an entry in the hand-written docs (README.md and docs/*.md but the
  generated docs/cli.md), and docs/cli.md is what ``tilake.cli_docs`` makes from the click tree today.
* Every relative link of README.md, docs/*.md and bench/README.md names a file that exists, and every
  ``#anchor`` a heading of that file.
* The README's two commands: the setup + example command is run (its ``tilake example`` part, in a temp
  folder, with this environment: no venv, no pip) and its outputs checked, with the three next commands the
  example prints and the example queries of docs/sql.md; the test command is the line ``.ci/run`` runs.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import click
import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
CI_RUN = REPO / ".ci" / "run"
EXAMPLE_RUN_ID = "example-qwen3-0.6b-grpo"
# what `tilake example` writes into its --out folder (README "The report"; the runtime-ops names follow
# the example's backends, Megatron and vLLM)
EXAMPLE_OUTPUTS = ("train_infer_op_diff_report.md", "train_infer_op_diff_report.html", "op_diff_overview.png",
                   "operator_diff_table.csv", "operator_diff_table_numeric.csv", "operator_diff.xlsx",
                   "megatron_runtime_ops.json", "vllm_runtime_ops.json", "lake/warehouse.duckdb")
# `tilake …` as the console script runs it (pyproject [project.scripts]: tilake = "tilake.cli:main")
TILAKE = [sys.executable, "-c", "import sys; from tilake.cli import main; main(args=sys.argv[1:], prog_name='tilake')"]


def hand_docs() -> str:
    """README.md and every docs/*.md except the generated cli.md, joined."""
    pages = [README] + sorted(p for p in DOCS.glob("*.md") if p.name != "cli.md")
    return "\n".join(p.read_text(encoding="utf-8") for p in pages)


def fenced(text: str) -> List[Tuple[str, str]]:
    """``(language, body)`` of every fenced code block of a Markdown text."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def mentions(docs: str, word: str) -> bool:
    """``word`` occurs as a whole word (not inside a longer name such as ``--lake-dir`` or ``fct_x_any``)."""
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", docs) is not None


# --- entries ----------------------------------------------------------------------------------------

def _commands():
    from tilake.cli import main
    from tilake.cli_docs import walk

    return list(walk(main))


def test_cli_reference_is_generated_from_the_click_tree():
    from tilake.cli_docs import render

    # the checkout's docs/cli.md, whether tilake is installed editable or not (CI installs a copy)
    assert (DOCS / "cli.md").read_text(encoding="utf-8") == render(), \
        "docs/cli.md is out of date with the click commands: run `python -m tilake.cli_docs` and commit it"


def test_cli_reference_lists_every_command_and_option():
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    for path, cmd in _commands():
        assert f"## `{' '.join(path)}`" in text, path
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden:
                assert any(mentions(text, o) for o in p.opts), (path, p.opts)


def test_every_command_has_an_entry_in_the_docs():
    docs = hand_docs()
    missing = [" ".join(path) for path, _cmd in _commands() if not mentions(docs, " ".join(path))]
    assert missing == [], f"commands with no entry in README.md / docs/*.md: {missing}"


def test_every_option_has_an_entry_in_the_docs():
    docs = hand_docs()
    missing = set()
    for path, cmd in _commands():
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.hidden:
                continue
            for o in p.opts + p.secondary_opts:
                if o.startswith("--") and o != "--help" and not mentions(docs, o):
                    missing.add(f"{' '.join(path)} {o}")
    assert sorted(missing) == [], "options with no entry in README.md / docs/*.md (docs/cli.md aside)"


def settings_names() -> List[str]:
    """Every ``TILAKE_*`` name ``settings.py`` defines (the switches and the seam's stdout markers)."""
    text = (REPO / "settings.py").read_text(encoding="utf-8")
    names = re.findall(r'^[A-Z_]+ = "(TILAKE_[A-Z0-9_]+)"', text, flags=re.M)
    assert "TILAKE_LAKE" in names and len(names) >= 8, names
    return names


def test_every_setting_has_an_entry_in_the_docs():
    settings_page = (DOCS / "settings.md").read_text(encoding="utf-8")
    missing = [n for n in settings_names() if not mentions(settings_page, n)]
    assert missing == [], f"TILAKE_* names of settings.py not in docs/settings.md: {missing}"


def mart_names() -> List[str]:
    marts = sorted(p.stem for p in (REPO / "dbt_project" / "models" / "marts").rglob("*.sql"))
    assert "fct_op_comparison" in marts and len(marts) > 20, marts
    return marts


def test_every_mart_has_an_entry_in_the_docs():
    docs = hand_docs()
    missing = [m for m in mart_names() if f"`{m}`" not in docs]
    assert missing == [], f"marts with no entry in README.md / docs/*.md: {missing}"


# --- links ------------------------------------------------------------------------------------------

def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation but ``-``/``_`` dropped, spaces → ``-``."""
    h = re.sub(r"[`*]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(md: Path) -> set:
    text = re.sub(r"^```.*?^```", "", md.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_relative_links_resolve():
    pages = [README, REPO / "bench" / "README.md"] + sorted(DOCS.glob("*.md"))
    broken = []
    for page in pages:
        text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert broken == []


# --- the README's two commands ----------------------------------------------------------------------

def readme_block(marker: str) -> str:
    """The one bash block of the README that contains ``marker``."""
    blocks = [body for lang, body in fenced(README.read_text(encoding="utf-8")) if lang == "bash" and marker in body]
    assert len(blocks) == 1, f"expected one README bash block with {marker!r}, found {len(blocks)}"
    return blocks[0]


def readme_setup_command() -> List[str]:
    """The setup + example command split at ``&&``; it must be one line."""
    body = readme_block("tilake example").strip()
    assert "\n" not in body, body
    return [part.strip() for part in body.split("&&")]


def readme_test_command() -> str:
    body = readme_block("pytest").strip()
    assert "\n" not in body, body
    return body


def test_readme_test_command_is_the_line_ci_runs():
    cmd = readme_test_command()
    assert cmd.endswith("python -m pytest -q"), cmd
    lines = [ln.strip() for ln in CI_RUN.read_text(encoding="utf-8").splitlines()]
    commands = [ln for ln in lines if ln and not ln.startswith("#")]
    assert commands[-1] == cmd, "the last command of .ci/run must be the README's test command, verbatim"
    # CI lints beside the tests through scripts/check (ruff, mypy, import contracts, sqlfluff, CLI docs), its
    # tools installed by the test extra
    assert "scripts/check" in commands
    check = (REPO / "scripts" / "check").read_text(encoding="utf-8")
    assert all(tool in check for tool in ("ruff check .", "mypy", "lint-imports", "sqlfluff lint", "cli_docs --check"))
    test_extra = re.search(r'^test = \[[^\]]*\]', (REPO / "pyproject.toml").read_text(encoding="utf-8"), flags=re.M)
    assert test_extra and all(f'"{t}' in test_extra.group(0) for t in ("ruff", "mypy", "sqlfluff", "import-linter"))


def test_readme_setup_command_is_venv_install_example():
    parts = readme_setup_command()
    assert parts[:3] == ["python3 -m venv .venv", ". .venv/bin/activate", "pip install ."], parts
    assert len(parts) == 4 and parts[3].split()[:2] == ["tilake", "example"], parts
    assert 'tilake = "tilake.cli:main"' in (REPO / "pyproject.toml").read_text(encoding="utf-8")


def _env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ, **extra)
    env.pop("TILAKE_RULES", None)   # the shipped rules, as on a fresh machine
    return env


def _tilake(args: List[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(TILAKE + args, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def example(tmp_path_factory) -> Tuple[Path, subprocess.CompletedProcess]:
    """The README's ``tilake example`` run once in an empty temp folder (its own lake, ``tilake-example/lake``)."""
    work = tmp_path_factory.mktemp("readme_example")
    args = shlex.split(readme_setup_command()[-1])[1:]
    env = {k: v for k, v in os.environ.items() if k != "TILAKE_LAKE"}
    p = subprocess.run(TILAKE + args, cwd=work, env=dict(env, TILAKE_DBT_PROGRESS="quiet"),
                       capture_output=True, text=True, timeout=900)
    return work, p


def test_readme_example_runs_and_writes_what_the_readme_says(example):
    work, p = example
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = work / "tilake-example"
    missing = [f for f in EXAMPLE_OUTPUTS if not (out / f).is_file()]
    assert missing == [], missing
    assert not (work / "tilake-lake").exists(), "the example must not write the default lake"
    # the summary ends with the README's next commands, the lake path filled in
    shown = readme_block("export TILAKE_LAKE=").strip().splitlines()
    lake = str((out / "lake").resolve())
    printed = [ln.strip() for ln in p.stdout.splitlines()]
    for line in shown:
        assert line.replace("/abs/path/tilake-example/lake", lake) in printed, line
    # the log-prob forward vs the prefill: KV cache and sampling run on the inference side only
    assert "推理独有 / inference only" in p.stdout


def test_readme_next_commands_run_on_the_example_lake(example):
    work, p = example
    assert p.returncode == 0
    lake = str((work / "tilake-example" / "lake").resolve())
    for line in readme_block("export TILAKE_LAKE=").strip().splitlines():
        if line.startswith("export "):
            continue
        args = shlex.split(line)
        assert args[0] == "tilake", line
        r = _tilake(args[1:] + (["--no-chart"] if args[1] == "trend" else []), work, TILAKE_LAKE=lake)
        assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
        assert EXAMPLE_RUN_ID in r.stdout or args[1] == "sql", (line, r.stdout[-2000:])
        if args[1] == "sql":
            assert "attention" in r.stdout, r.stdout[-2000:]


def test_sql_page_examples_run_on_the_example_lake(example):
    """Every bash block of docs/sql.md that names the example's run runs, as written, on its lake."""
    work, p = example
    assert p.returncode == 0
    lake = str((work / "tilake-example" / "lake").resolve())
    blocks = [b for lang, b in fenced((DOCS / "sql.md").read_text(encoding="utf-8"))
              if lang == "bash" and EXAMPLE_RUN_ID in b]
    assert len(blocks) >= 2, blocks
    shell_fn = "tilake() { " + " ".join(shlex.quote(a) for a in TILAKE) + ' "$@"; }\n'
    for block in blocks:
        script = "set -euo pipefail\n" + shell_fn + block.replace("/abs/path/tilake-example/lake", lake)
        r = subprocess.run(["bash", "-c", script], cwd=REPO, env=_env(TILAKE_LAKE=lake),
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (block, r.stdout[-2000:], r.stderr[-2000:])
        assert "error:" not in r.stderr, r.stderr[-2000:]
