"""Typed records at the seams (issue 22, "No Dict[str, Any] crosses a room boundary").

A *room* is one of the import-linter layers of ``pyproject.toml`` (``cli``, ``pipeline``, ``api``,
``reports``, ``diagnosis``, ``synth``, ``workloads``, ``ingest``, ``lake``, ``models``, ``files``,
``settings``, ``errors``; a top-level module outside them is a room of its own). A *seam* is a public
function (or a public method of a public class) that one room imports from another:
``from tilake.lake.warehouse import build`` in ``pipeline`` makes ``lake.warehouse.build`` a seam, and
``from tilake.lake import warehouse`` followed by ``warehouse.build(...)`` does too.

The test walks the package with ``ast`` (no import, so it is fast and sees every file), resolves each
cross-room import to the function that defines it (following re-exports), and fails when a seam's
parameters or return are annotated ``Dict[str, Any]`` / ``dict[str, Any]`` / ``Mapping[str, Any]`` or a
bare ``dict`` / ``Dict``, anywhere inside the annotation (``Optional[Dict[str, Any]]``,
``List[dict]`` …). Such a seam should take or return a dataclass / NamedTuple instead.

A record's own serialiser (a method named ``to_dict`` / ``to_json``, where a record becomes the
JSON a file or ``--json`` writes) is the intended exit and is not a seam.

``ALLOWED`` lists the seams not converted yet, each ``"module:function"``; the test also fails when a
listed seam is clean (or gone), so the list only shrinks.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

REPO = Path(__file__).resolve().parents[2]
PKG = "tilake"
SERIALISERS = {"to_dict", "to_json"}
SKIP_DIRS = {"tests", "bench", "e2e", "examples", "dbt_project", "docs", ".pyroot", ".venv", "build"}

# seams not converted yet: none (the lake's generic row writer takes tilake.lake.schema.LakeRow rows: column
# name → a storable value, the table's columns being tilake.lake.schema.TABLES)
ALLOWED: Set[str] = set()


def _modules() -> Dict[str, Path]:
    mods: Dict[str, Path] = {}
    for p in sorted(REPO.rglob("*.py")):
        rel = p.relative_to(REPO)
        if rel.parts[0] in SKIP_DIRS or any(part.startswith(".") for part in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join([PKG] + parts)] = p
    return mods


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PKG


def _is_pkg(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(src: str, src_path: Path, node: ast.ImportFrom) -> Optional[str]:
    if node.level == 0:
        return node.module if (node.module or "").split(".")[0] == PKG else None
    base = src.split(".")
    if not _is_pkg(src_path):
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


class _Index:
    def __init__(self) -> None:
        self.mods = _modules()
        self.trees = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in self.mods.items()}

    def definition(self, module: str, name: str, depth: int = 0) -> Optional[Tuple[str, ast.AST]]:
        """The FunctionDef/ClassDef behind ``module.name`` (following ``from x import name``)."""
        tree = self.trees.get(module)
        if tree is None or depth > 8:
            return None
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return module, node
        for node in tree.body:
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, self.mods[module], node)
                for a in node.names:
                    if target and (a.asname or a.name) == name:
                        return self.definition(target, a.name, depth + 1)
        return None


def _bad(ann: Optional[ast.AST]) -> bool:
    if ann is None:
        return False
    if isinstance(ann, ast.Constant) and isinstance(ann.value, str):
        try:
            ann = ast.parse(ann.value, mode="eval").body
        except SyntaxError:
            return False
    for sub in ast.walk(ann):
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) \
                and sub.value.id in ("Dict", "dict", "Mapping", "MutableMapping"):
            sl = sub.slice
            elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
            if len(elts) == 2 and isinstance(elts[0], ast.Name) and elts[0].id == "str" \
                    and isinstance(elts[1], ast.Name) and elts[1].id == "Any":
                return True
    bare: Set[int] = set()
    for sub in ast.walk(ann):
        if isinstance(sub, ast.Subscript):
            bare.add(id(sub.value))
    return any(isinstance(s, ast.Name) and s.id in ("dict", "Dict") and id(s) not in bare for s in ast.walk(ann))


def _signature_bad(fn: ast.AST) -> List[str]:
    a = fn.args
    params = a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]
    out = [p.arg for p in params if _bad(p.annotation)]
    if _bad(fn.returns):
        out.append("return")
    return out


def _seams(index: _Index, module: str, node: ast.AST) -> Iterator[Tuple[str, ast.AST]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if not node.name.startswith("_"):
            yield f"{module}:{node.name}", node
    elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name not in SERIALISERS \
                    and (not item.name.startswith("_") or item.name == "__init__"):
                yield f"{module}:{node.name}.{item.name}", item


def cross_room_seams() -> Dict[str, List[str]]:
    """``{"module:function": [bad parameter names, "return"]}`` for every seam with a bad annotation."""
    index = _Index()
    found: Dict[str, List[str]] = {}

    def check(target: str, name: str) -> None:
        hit = index.definition(target, name)
        if hit is None:
            return
        mod, node = hit
        for key, fn in _seams(index, mod, node):
            bad = _signature_bad(fn)
            if bad:
                found[key] = bad

    for src, tree in index.trees.items():
        room = _room(src)
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(src, index.mods[src], node)
            if not target or _room(target) == room:
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in index.trees:  # a module: every attribute used on it is a seam
                    alias = a.asname or a.name
                    for use in ast.walk(tree):
                        if isinstance(use, ast.Attribute) and isinstance(use.value, ast.Name) \
                                and use.value.id == alias:
                            check(sub, use.attr)
                else:
                    check(target, a.name)
    return found


def test_no_untyped_dict_crosses_a_room_boundary():
    found = cross_room_seams()
    new = {k: v for k, v in found.items() if k not in ALLOWED}
    assert new == {}, "seams with Dict[str, Any]/bare dict (use a record): " + \
        "\n".join(f"{k} ({', '.join(v)})" for k, v in sorted(new.items()))
    assert sorted(ALLOWED - set(found)) == [], "seam converted: remove it from ALLOWED"


def test_the_scanner_sees_a_seam(tmp_path):
    # the checker itself: a bare dict parameter and a Dict[str, Any] return are both caught
    tree = ast.parse("def f(a: dict, b: 'Optional[Dict[str, Any]]') -> List[Dict[str, Any]]: ...\n"
                     "def g(a: Dict[str, int]) -> Tuple[int, str]: ...\n")
    f, g = tree.body
    assert _signature_bad(f) == ["a", "b", "return"]
    assert _signature_bad(g) == []
