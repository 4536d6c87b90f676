"""Bash syntax of a launch script, from ``tree-sitter-bash``: the simple commands in source order.

The grammar (``tree-sitter-bash``, https://github.com/tree-sitter/tree-sitter-bash) does the
lexing — quotes, ``\\``-newline continuations, comments, heredocs and here-strings, ``NAME=(...)``
arrays over several lines, ``$(...)``/``$((...))``/``${...}``, ``case`` patterns, C-style ``for``.
This module only walks its tree and hands :mod:`.script` a flat list of :class:`Command`, each with
the exact source text and character offsets of its words, whether it sits in a conditional block
(``if``/``for``/``while``/``until``/``case``/``( subshell )``) or a function body, and the pipeline
it belongs to. Words are kept as raw source text: their expansion is our own (:mod:`.shell`).

Measured on the 10 real verl NPU scripts in ``shared/fixtures/verl_scripts`` and the 6 in
``tests/data/verl_launch``: tree-sitter-bash parses all 16 without an error node; ``bashlex`` 0.18
rejects 8 of them (``$((...))`` arithmetic, ``NAME=(...)`` arrays, ``case`` patterns, ``[[ ]]``).
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import List, Optional

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from tilake.errors import TilakeError

_PARSER = Parser(Language(tree_sitter_bash.language()))


@dataclass
class Token:
    """One word (or redirection, or array assignment) of the script.

    Attributes:
        kind: ``word`` | ``redir`` (``2>&1``, ``> f``, ``<<EOF`` with its body) | ``array``
            (``NAME=( ... )``).
        raw: exact source text (``text[start:end] == raw``).
        start, end: character offsets in the script text.
        name, append, elements: for ``array`` tokens — the variable, ``+=``, element words.
    """

    kind: str
    raw: str
    start: int
    end: int
    name: str = ""
    append: bool = False
    elements: List["Token"] = field(default_factory=list)


@dataclass
class Command:
    """One simple command: its word tokens, redirections, nesting and line.

    Attributes:
        words: the words in order (prefix assignments ``A=1`` included; for ``export``/``local``/
            ``unset`` the keyword is ``words[0]``). redirs: its redirections. line: 1-based line
            of its first word. conditional: inside ``if``/``for``/``while``/``until``/``case``/
            subshell. in_function: inside a function body (``function`` = that function's name).
        arrays: ``NAME=( ... )`` assignments of the command. A command right of ``&&``/``||``
            counts as conditional (it runs only when the left one succeeds or fails).
        pipeline: first word of every command of the pipeline it belongs to, in order (``[]``
            when it is not part of a pipeline). pipe_index: its position there.
    """

    words: List[Token]
    redirs: List[Token]
    line: int
    conditional: bool
    in_function: bool
    arrays: List[Token] = field(default_factory=list)
    function: str = ""
    pipeline: List[str] = field(default_factory=list)
    pipe_index: int = 0
    loops: List["Loop"] = field(default_factory=list)


@dataclass
class Loop:
    """A ``for``/``select``/``while``/``until`` loop around a command (outermost first).

    Attributes:
        kind: ``for`` | ``c_for`` | ``select`` | ``while`` | ``until``. header: its source text up to ``do``.
        variable: the loop variable (``for``/``select``), else "". values: the raw words after ``in``
            (``["\"${ENGINES[@]}\""]``; empty: ``"$@"`` or a C-style/while loop). start: character offset of the
            loop keyword. line: its 1-based line.
    """

    kind: str
    header: str
    variable: str
    values: List[str]
    start: int
    line: int


_CONDITIONAL = {"if_statement", "elif_clause", "else_clause", "while_statement", "until_statement",
                "case_statement", "case_item", "subshell", "for_statement", "c_style_for_statement",
                "select_statement"}
#: children of a loop header that are not commands (loop variable, word list, C-style clauses)
_LOOP_BODY_ONLY = {"for_statement", "c_style_for_statement", "select_statement"}
_PASS = {"program", "compound_statement", "do_group", "negated_command"}
_REDIRS = {"file_redirect", "heredoc_redirect", "herestring_redirect"}
_WHAT = {"string": "double quote", "raw_string": "single quote", "array": "array", "command_substitution":
         "command substitution", "expansion": "${...} expansion", "arithmetic_expansion": "$((...))",
         "if_statement": "if (no fi)", "do_group": "loop (no done)", "case_statement": "case (no esac)",
         "compound_statement": "{ ... } block", "subshell": "( subshell"}


class _Walker:
    def __init__(self, text: str, data: bytes) -> None:
        self.text = text
        self.data = data
        self.ascii = len(text) == len(data)
        # byte offset of every character start, for byte -> character offsets of non-ASCII scripts
        self.char_bytes: List[int] = [] if self.ascii else self._char_bytes(text)
        self.out: List[Command] = []
        self.loops: List[Loop] = []
        # character offset of every newline: line numbers by bisection (a count from the start for each of
        # 200,000 commands was quadratic)
        self.newlines: List[int] = [m.start() for m in re.finditer("\n", text)]

    def line(self, offset: int) -> int:
        """1-based line of character ``offset``."""
        return bisect.bisect_left(self.newlines, offset) + 1

    @staticmethod
    def _char_bytes(text: str) -> List[int]:
        offs, b = [], 0
        for ch in text:
            offs.append(b)
            b += len(ch.encode("utf-8"))
        return offs

    def char(self, byte: int) -> int:
        if self.ascii:
            return byte
        return bisect.bisect_left(self.char_bytes, byte) if byte < len(self.data) else len(self.text)

    def token(self, node: Node, kind: str = "word") -> Token:
        s, e = self.char(node.start_byte), self.char(node.end_byte)
        return Token(kind, self.text[s:e], s, e)

    def array(self, node: Node) -> Optional[Token]:
        """``NAME=( ... )`` / ``NAME+=( ... )`` as an ``array`` token, else None."""
        value = node.child_by_field_name("value")
        if value is None or value.type != "array":
            return None
        tok = self.token(node, "array")
        tok.name = node.child_by_field_name("name").text.decode("utf-8", "replace")
        tok.append = any(c.type == "+=" for c in node.children)
        tok.elements = [self.token(c) for c in value.named_children if c.type != "comment"]
        return tok

    # ------------------------------------------------------------------ walk
    def walk(self, node: Node, cond: bool, fn: str, redirs: List[Token], pipe: Optional[tuple] = None) -> None:
        t = node.type
        if t == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if body is not None:
                self.walk(body, cond, fn or (name.text.decode("utf-8", "replace") if name else "?"), [])
            return
        if t == "redirected_statement":
            extra = [self.token(c, "redir") for c in node.children if c.type in _REDIRS]
            body = node.child_by_field_name("body")
            if body is not None:
                self.walk(body, cond, fn, redirs + extra, pipe)
            return
        if t == "pipeline":
            members = [c for c in node.named_children if c.type != "comment"]
            names = [self._first_word(m) for m in members]
            for k, m in enumerate(members):
                self.walk(m, cond, fn, redirs, (names, k))
            return
        if t in _LOOP_BODY_ONLY or t in ("while_statement", "until_statement"):
            body = node.child_by_field_name("body")
            self.loops.append(self._loop(node, body))
            try:
                if t in _LOOP_BODY_ONLY:
                    if body is not None:
                        self.walk(body, True, fn, [])
                else:
                    for c in node.children:
                        self.walk(c, True, fn, [])
            finally:
                self.loops.pop()
            return
        if t in _CONDITIONAL:
            skip = {"value"} if t in ("case_statement", "case_item") else set()
            for k, c in enumerate(node.children):
                if node.field_name_for_child(k) not in skip:
                    self.walk(c, True, fn, [])
            return
        if t == "list":         # a && b / a || b: b runs only when a succeeds (fails)
            for k, c in enumerate(c for c in node.children if c.is_named):
                self.walk(c, cond or k > 0, fn, [])
            return
        if t in _PASS:
            for c in node.children:
                self.walk(c, cond, fn, [])
            return
        cmd = self._command(node)
        if cmd is None:
            return
        words, arrays, own = cmd
        first = (words or arrays)[0]
        names, k = pipe if pipe else ([], 0)
        self.out.append(Command(words, redirs + own, self.line(first.start), cond, bool(fn),
                                arrays, fn, list(names), k, list(self.loops)))

    def _loop(self, node: Node, body: Optional[Node]) -> Loop:
        start = self.char(node.start_byte)
        end = self.char(body.start_byte) if body is not None else self.char(node.end_byte)
        kind = {"for_statement": "for", "c_style_for_statement": "c_for", "select_statement": "select",
                "while_statement": "while", "until_statement": "until"}[node.type]
        if kind == "for" and node.children and node.children[0].type == "select":
            kind = "select"
        var = node.child_by_field_name("variable")
        values = [self.token(c).raw for k, c in enumerate(node.children)
                  if node.field_name_for_child(k) == "value"]
        return Loop(kind, self.text[start:end].strip(), self.token(var).raw if var is not None else "", values, start,
                    self.line(start))

    def _first_word(self, node: Node) -> str:
        while node.type == "redirected_statement" and node.child_by_field_name("body") is not None:
            node = node.child_by_field_name("body")
        name = node.child_by_field_name("name") if node.type == "command" else None
        if name is not None:
            return self.token(name).raw
        return self.token(node).raw.split(None, 1)[0] if node.text.strip() else ""

    def _command(self, node: Node):
        """``(words, arrays, redirections)`` of a statement node that is a simple command, else None."""
        t = node.type
        words: List[Token] = []
        arrays: List[Token] = []
        redirs: List[Token] = []
        if t == "variable_assignment":
            arr = self.array(node)
            (arrays if arr else words).append(arr or self.token(node))
        elif t in ("variable_assignments", "declaration_command", "unset_command", "command"):
            for c in node.children:
                if c.type == "comment" or (t == "variable_assignments" and not c.is_named):
                    continue
                if c.type in _REDIRS:
                    redirs.append(self.token(c, "redir"))
                    continue
                arr = self.array(c) if c.type == "variable_assignment" else None
                (arrays if arr else words).append(arr or self.token(c))
        else:
            return None       # test_command ([ ]), comments, bare words of a header, ...
        return (words, arrays, redirs) if (words or arrays) else None


@dataclass
class VarRef:
    """A bare ``$NAME`` / ``${NAME}`` reference (no ``:-``-style default), for ``set -u`` checks.

    Attributes:
        name: the variable. start: character offset. line: 1-based line.
        certain: bash evaluates it whenever the script reaches it (top level, or the condition of a
            top-level ``if``/``while``; not inside a branch, loop body, function or after ``&&``/``||``).
    """

    name: str
    start: int
    line: int
    certain: bool


@dataclass
class BashScript:
    """The parsed script: its simple commands and its bare variable references, in source order."""

    commands: List[Command]
    refs: List[VarRef]


_DEFAULT_OP = re.compile(rb"\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=+?]")


def _mask_default_brackets(data: bytes) -> bytes:
    """``[``/``]`` inside the word of a ``${NAME:-word}`` expansion (also ``-``, ``:=``, ``:+``, ``:?``) replaced by
    ``_`` (same byte offsets). tree-sitter-bash 0.23 rejects a ``[`` followed by a quote there
    (``${CONTENTS:-['npu','cpu']}``, verl ``tests/special_npu/run_qwen3_8b_grpo_profiling.sh``), which bash
    reads as the default ``[npu,cpu]``; the words keep their original text (only the parse sees the mask)."""
    out = bytearray(data)
    for m in _DEFAULT_OP.finditer(data):
        depth, k = 1, m.end()
        while k < len(data) and depth:
            ch = data[k:k + 1]
            if data[k:k + 2] == b"${":
                depth += 1
                k += 2
                continue
            if ch == b"\\":
                k += 2
                continue
            if ch == b"}":
                depth -= 1
            elif ch in (b"[", b"]"):
                out[k] = ord("_")
            k += 1
    return bytes(out)


_UNDECODABLE = re.compile("[\udc80-\udcff]")


def mask_undecodable(text: str) -> str:
    """``text`` (decoded with ``surrogateescape``) with each byte that was not UTF-8 shown as U+FFFD: the same
    character offsets, printable and encodable."""
    return _UNDECODABLE.sub("\ufffd", text)


def parse_bash(text: str, path: str) -> BashScript:
    """:func:`parse_commands` plus the bare variable references (:class:`VarRef`).

    ``text`` may hold bytes that were not UTF-8 (decoded with ``surrogateescape``, a GBK comment): the words
    then carry U+FFFD in their place (same offsets).

    Raises:
        TilakeError: as :func:`parse_commands`.
    """
    text = mask_undecodable(text)
    data = text.encode("utf-8")
    tree = _PARSER.parse(data)
    if tree.root_node.has_error:
        masked = _mask_default_brackets(data)
        retry = _PARSER.parse(masked) if masked != data else None
        if retry is None or retry.root_node.has_error:
            raise TilakeError(_syntax_error(tree.root_node, data), path=path)
        tree = retry
    _check_depth(tree.root_node, path)
    w = _Walker(text, data)
    w.walk(tree.root_node, False, "", [])
    refs: List[VarRef] = []
    _collect_refs(tree.root_node, w, refs)
    return BashScript(w.out, refs)


#: deepest syntax tree accepted (tree-sitter levels; one ``if``/``$(``/``(`` level is 2-4 of them): the walk below is
#: recursive, and real launch scripts stay under 40
MAX_SYNTAX_DEPTH = 300


def _check_depth(root: Node, path: str) -> None:
    """Refuse a script nested deeper than :data:`MAX_SYNTAX_DEPTH` (iterative: no recursion on hostile input).

    Raises:
        TilakeError: naming the line where the nesting passes the limit.
    """
    cur = root.walk()
    depth = 0
    while True:
        if depth > MAX_SYNTAX_DEPTH:
            raise TilakeError(f"line {cur.node.start_point[0] + 1}: nesting deeper than {MAX_SYNTAX_DEPTH} syntax "
                              "levels (ifs, loops, subshells, $(...) or ${...} inside each other): not a launch "
                              "script tilake reads", path=path)
        if cur.goto_first_child():
            depth += 1
            continue
        while not cur.goto_next_sibling():
            if not cur.goto_parent():
                return
            depth -= 1


_UNCERTAIN_PARENTS = _CONDITIONAL | {"function_definition", "do_group"}


def _certain(node: Node) -> bool:
    child, parent = node, node.parent
    while parent is not None:
        if parent.type in ("if_statement", "while_statement", "until_statement"):
            cond = [parent.children[k] for k in range(parent.child_count)
                    if parent.field_name_for_child(k) == "condition"]
            if not any(c.start_byte <= child.start_byte and child.end_byte <= c.end_byte for c in cond):
                return False
        elif parent.type in _UNCERTAIN_PARENTS:
            return False
        elif parent.type == "list" and child.start_byte != parent.named_children[0].start_byte:
            return False        # right of && / ||
        child, parent = parent, parent.parent
    return True


def _collect_refs(node: Node, w: "_Walker", out: List[VarRef]) -> None:
    if node.type in ("simple_expansion", "expansion"):
        named = [c for c in node.named_children]
        bare = len(named) == 1 and named[0].type == "variable_name" and \
            [c.type for c in node.children if not c.is_named] in (["$"], ["${", "}"])
        if bare:
            start = w.char(node.start_byte)
            out.append(VarRef(named[0].text.decode("utf-8", "replace"), start, node.start_point[0] + 1,
                              _certain(node)))
        return
    if node.type in ("heredoc_body",) and node.parent is not None and b"'" in (node.parent.child_by_field_name("start") or node).text:
        return
    for c in node.children:
        _collect_refs(c, w, out)


def parse_commands(text: str, path: str) -> List[Command]:
    """The simple commands of a bash script, in source order (heredoc bodies are data, not code).

    Args:
        text: the script. path: its path (for error messages).
    Returns:
        list of :class:`Command`; offsets are character offsets into ``text``.
    Raises:
        TilakeError: the script is not valid bash (unterminated quote, array, ``$(``, ``if`` without
            ``fi``...); the message names the line where the unclosed construct starts.
    """
    return parse_bash(text, path).commands


def _first_error(node: Node) -> Optional[Node]:
    """The first ERROR or missing node in source order (iterative: a hostile script may nest thousands deep)."""
    while True:
        if node.type == "ERROR" or node.is_missing:
            return node
        nxt = next((c for c in node.children if c.has_error or c.is_missing or c.type == "ERROR"), None)
        if nxt is None:
            return None
        node = nxt


def _syntax_error(root: Node, data: bytes) -> str:
    """One line naming the first syntax error: ``line N: unterminated single quote`` etc."""
    err = _first_error(root) or root
    if err.is_missing and err.parent is not None:
        opener = err.parent
        line = opener.start_point[0] + 1
        what = _WHAT.get(opener.type, opener.type.replace("_", " "))
        if opener.type == "array" and opener.parent is not None and opener.parent.type == "variable_assignment":
            name = opener.parent.child_by_field_name("name")
            what = f"array {name.text.decode('utf-8', 'replace') if name else ''}=("
        if opener.type == "command_substitution" and data[opener.start_byte:opener.start_byte + 1] == b"`":
            what = "backquote"
        return f"line {line}: unterminated {what} (expected `{err.type}`)"
    line = err.start_point[0] + 1
    head = data[err.start_byte:err.end_byte].lstrip()[:1]
    if head == b"'":
        return f"line {line}: unterminated single quote"
    if head == b'"':
        return f"line {line}: unterminated double quote"
    snippet = data[err.start_byte:err.end_byte].decode("utf-8", "replace").strip().splitlines()
    near = snippet[0][:40] if snippet else ""
    return f"line {line}: bash syntax error near `{near}`"
