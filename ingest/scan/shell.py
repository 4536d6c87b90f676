"""Our own evaluation of bash words for ``tilake scan`` stage 1 (nothing is ever executed).

:class:`Shell` holds the variable state of a launch script read top to bottom and expands one
word's source text the way bash would: quotes, ``${VAR:-x}``/``:=``/``:+``/``:?`` defaults,
``$((a+b))`` integer arithmetic, ``"${ARR[@]}"``/``"$@"`` (one field per element), field
splitting of unquoted expansions and ``~``. Anything only known at run time — ``$(...)`` and
backticks, ``${v%pat}``-style pattern expansions, ``$RANDOM`` — becomes :class:`Unknown`, which
carries the reason and is reported as ``"unknown"``, never guessed.

Bash semantics followed: bash(1) "EXPANSION" (parameter expansion, arithmetic expansion, word
splitting on the default IFS of space, tab, newline); the tests in
``tests/ingest/scan/test_scan_script.py`` compare the result with what real bash passes.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

UNKNOWN = "unknown"

class Unknown:
    """A value the parser cannot know without running the script (carries the reason)."""

    __slots__ = ("reason", "key")

    def __init__(self, reason: str, key: Optional[str] = None) -> None:
        self.reason = reason
        self.key = key  # the Hydra key when the unknown word was ``key=<unknown>``

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Unknown({self.reason!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unknown)

    def __hash__(self) -> int:  # pragma: no cover
        return 0


Value = Union[str, Unknown]

#: a word that is only ``"$@"`` / ``"${@}"`` / ``"${NAME[@]}"`` (quoted: one field per element)
_ALL_ELEMENTS_RE = re.compile(r'"\$(?:@|\{@\}|\{[A-Za-z_][A-Za-z0-9_]*\[@\]\})"')
#: ``NAME=`` / ``NAME+=`` at the start of a word (an assignment).
ASSIGN_PREFIX_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
#: a Hydra ``key=`` at the start of a word (``+``/``++``/``~`` prefixes allowed).
KEY_RAW_RE = re.compile(r"^[+~]{0,2}([A-Za-z_][A-Za-z0-9_.]*)=")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


#: longest value (characters) one word may expand to; longer is Unknown (``A="$A$A"`` thirty times would be GBs)
MAX_VALUE_CHARS = 1 << 20


class Multi(list):
    """Result of ``${ARR[@]}`` / ``$@``: several fields."""


class Maybe:
    """Array elements appended inside a conditional block: zero or more fields, keys known."""

    __slots__ = ("keys", "reason")

    def __init__(self, keys: List[str], reason: str) -> None:
        self.keys = keys
        self.reason = reason


class Shell:
    """Variable state plus word expansion (no execution).

    Args:
        env: the environment the script will run with (strings).
        args: positional parameters (``$1``... / ``$@``) the script will receive.
        script_name: ``$0``.
    """

    def __init__(self, env: Mapping[str, str], args: Sequence[str] = (), script_name: str = "") -> None:
        self.vars: Dict[str, Any] = dict(env)
        self.exported = set(env)
        self.args = list(args)
        self.script_name = script_name
        self.maybe_hits: List[Maybe] = []

    # ---------------------------------------------------------------- parameters
    def lookup(self, name: str) -> Any:
        """Scalar/array/None for ``name`` (positional and special parameters included)."""
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.script_name
            return self.args[k - 1] if k <= len(self.args) else None
        if name in ("@", "*"):
            return Multi(self.args)
        if name == "#":
            return str(len(self.args))
        if name in ("$", "!", "?", "RANDOM", "SECONDS", "BASHPID", "PPID", "LINENO"):
            return Unknown(f"${name} is only known at run time")
        return self.vars.get(name)

    def _param(self, body: str, quoted: bool) -> Any:
        if body.startswith("#") and len(body) > 1:
            v = self.lookup(body[1:].split("[")[0])
            if isinstance(v, Unknown):
                return v
            if isinstance(v, list):
                return str(len(v))
            return str(len(v or ""))
        if body.startswith("!"):
            return Unknown(f"indirect expansion ${{{body}}} not evaluated")
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!])(\[([^\]]*)\])?", body)
        if not m:
            return Unknown(f"${{{body}}} not understood")
        name, sub = m.group(1), m.group(3)
        rest = body[m.end():]
        val = self.lookup(name)
        if sub is not None:
            if isinstance(val, Unknown):
                pass
            elif sub in ("@", "*"):
                val = Multi(val if isinstance(val, list) else ([] if val is None else [val]))
            else:
                idx = self.arith(sub)
                if isinstance(idx, Unknown):
                    val = idx
                elif isinstance(val, list):
                    i = int(idx)
                    val = val[i] if -len(val) <= i < len(val) else None
                elif int(idx) != 0:
                    val = None
        elif isinstance(val, list) and not isinstance(val, Multi):
            val = val[0] if val else None  # $ARR == ${ARR[0]}
        if not rest:
            return val
        for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
            if rest.startswith(op):
                word = rest[len(op):]
                colon = op.startswith(":")
                unset = val is None or (colon and val == "")
                if isinstance(val, Unknown):
                    return val
                if op[-1] in "-=":
                    if unset:
                        dflt = self.expand_string(word)
                        if op[-1] == "=" and not isinstance(dflt, Unknown):
                            self.vars[name] = dflt
                        return dflt
                    return val
                if op[-1] == "+":
                    return "" if unset else self.expand_string(word)
                if unset:
                    return Unknown(f"${{{body}}}: {name} is unset (the script would stop)")
                return val
        return Unknown(f"pattern expansion ${{{body}}} not evaluated")

    # ---------------------------------------------------------------- arithmetic
    def arith(self, expr: str) -> Value:
        """Integer value of a ``$(( ))`` expression (``+ - * / %`` and parentheses), or Unknown."""
        text = self.expand_string(expr, dquote=True)
        if isinstance(text, Unknown):
            return text

        def name_value(m: "re.Match[str]") -> str:
            v = self.lookup(m.group(0))
            if v is None or v == "":
                return "0"
            if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
                return v.strip()
            raise ValueError(m.group(0))

        try:
            text = _NAME_RE.sub(name_value, text)
            tree = ast.parse(text.strip() or "0", mode="eval")
            return str(_eval_int(tree.body))
        except (ValueError, SyntaxError, ZeroDivisionError, TypeError):
            return Unknown(f"arithmetic $(({expr})) not evaluated")

    # ---------------------------------------------------------------- words
    def expand_string(self, raw: str, dquote: bool = False) -> Value:
        """Expand ``raw`` to one string (no field splitting), as inside double quotes."""
        fields = self._expand(raw, split=False, in_dquote=dquote)
        out = []
        for f in fields:
            if isinstance(f, Unknown):
                return f
            out.append(f)
        return " ".join(out)

    def expand_word(self, raw: str) -> List[Value]:
        """Fields a word expands to (unquoted expansions split on whitespace; ``"$@"`` and
        ``"${A[@]}"`` give one field per element, and no field at all when empty — bash(1),
        "Special Parameters": ``"$@"`` with no positional parameters expands to nothing). An
        unknown ``key=...`` word keeps its key."""
        fields = self._expand(raw, split=True)
        if fields == [""] and _ALL_ELEMENTS_RE.fullmatch(raw):
            return []
        m = KEY_RAW_RE.match(raw)
        if m and len(fields) == 1 and isinstance(fields[0], Unknown) and fields[0].key is None:
            fields = [Unknown(fields[0].reason, key=m.group(1))]
        return fields

    def _expand(self, raw: str, split: bool, in_dquote: bool = False) -> List[Value]:
        fields: List[Value] = []
        cur: List[str] = []
        state = {"content": False, "unknown": None, "size": 0}

        def close() -> None:
            if state["unknown"] is not None:
                fields.append(state["unknown"])
            elif cur or state["content"]:
                fields.append("".join(cur))
            cur.clear()
            state["content"] = False
            state["unknown"] = None
            state["size"] = 0

        def add(value: Any, quoted: bool) -> None:
            if value is None:
                if quoted:
                    state["content"] = True
                return
            if isinstance(value, Unknown):
                state["unknown"] = state["unknown"] or value
                state["content"] = True
                return
            if isinstance(value, Multi):
                self.maybe_hits.extend(it for it in value if isinstance(it, Maybe))
                items = [it for it in value if not isinstance(it, Maybe)]
                if not quoted:
                    items = [p for it in items for p in (it.split() if isinstance(it, str) else [it])]
                for k, it in enumerate(items):
                    if k:
                        close()
                    add(it, True)
                if not items and quoted:
                    pass
                return
            state["size"] += len(value)
            if state["size"] > MAX_VALUE_CHARS:
                add(Unknown(f"a value longer than {MAX_VALUE_CHARS} characters is not evaluated"), quoted)
                return
            if quoted or not split:
                cur.append(value)
                state["content"] = True
                return
            parts = re.split(r"[ \t\n]+", value)
            for k, p in enumerate(parts):
                if k:
                    close()
                if p:
                    cur.append(p)
                    state["content"] = True

        i, n = 0, len(raw)
        dq = in_dquote
        if not dq and raw.startswith("~") and (n == 1 or raw[1] == "/"):
            add(self.vars.get("HOME", Unknown("$HOME unset")), True)
            i = 1
        while i < n:
            c = raw[i]
            if c == "\\":
                if i + 1 < n:
                    nxt = raw[i + 1]
                    if nxt == "\n":
                        pass
                    elif dq and nxt not in '$`"\\':
                        add("\\" + nxt, True)
                    else:
                        add(nxt, True)
                i += 2
                continue
            if c == "'" and not dq:
                j = raw.find("'", i + 1)
                add(raw[i + 1:j], True)
                state["content"] = True
                i = j + 1
                continue
            if c == '"':
                dq = not dq
                state["content"] = True
                i += 1
                continue
            if c == "`":
                j = raw.find("`", i + 1)
                add(Unknown(f"command substitution `{raw[i + 1:j]}` not executed"), dq)
                i = j + 1
                continue
            if c == "$" and i + 1 < n:
                nxt = raw[i + 1]
                if raw.startswith("$((", i):
                    j = _match_close(raw, i + 1, "(", ")")
                    add(self.arith(raw[i + 3:j - 1]), dq)
                    i = j + 1
                    continue
                if nxt == "(":
                    j = _match_close(raw, i + 1, "(", ")")
                    add(Unknown(f"command substitution $({raw[i + 2:j]}) not executed"), dq)
                    i = j + 1
                    continue
                if nxt == "{":
                    j = _match_close(raw, i + 1, "{", "}")
                    add(self._param(raw[i + 2:j], dq), dq)
                    i = j + 1
                    continue
                if nxt == "'" and not dq:
                    j = raw.find("'", i + 2)
                    add(_ansi_c(raw[i + 2:j]), True)
                    i = j + 1
                    continue
                m = _NAME_RE.match(raw, i + 1)
                if m:
                    add(self.lookup(m.group(0)), dq)
                    i = m.end()
                    continue
                if nxt.isdigit() or nxt in "@*#?$!":
                    add(self.lookup(nxt), dq)
                    i += 2
                    continue
            add(c, True)
            i += 1
        close()
        return fields


def _ansi_c(body: str) -> Value:
    """The value of ``$'body'`` (bash ANSI-C quoting: ``\\n``, ``\\t``, ``\\xHH``, ``\\uHHHH`` ...), or Unknown when
    Python's ``unicode_escape`` reads it otherwise (``\\x`` without digits, ``\\N{...}``)."""
    try:
        return body.encode("utf-8", "surrogateescape").decode("unicode_escape")
    except UnicodeError:
        return Unknown(f"ANSI-C quoted $'{body[:40]}' not evaluated")


def _match_close(raw: str, i: int, open_c: str, close_c: str) -> int:
    depth = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            i += 2
            continue
        if c == "'" and open_c == "(":
            j = raw.find("'", i + 1)
            i = n if j < 0 else j + 1
            continue
        if c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return n - 1


def _eval_int(node: ast.AST) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval_int(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval_int(node.left), _eval_int(node.right)
        if isinstance(node.op, ast.Add):
            return a + b
        if isinstance(node.op, ast.Sub):
            return a - b
        if isinstance(node.op, ast.Mult):
            return a * b
        if isinstance(node.op, (ast.Div, ast.FloorDiv)):
            return int(a / b)
        if isinstance(node.op, ast.Mod):
            return a - b * int(a / b)
    raise ValueError("not integer arithmetic")




def plain(v: Any) -> Any:
    """A value as reported: Unknown → ``"unknown"``, a conditional array part → its keys; lists kept."""
    if isinstance(v, Unknown):
        return UNKNOWN
    if isinstance(v, Maybe):
        return "unknown (conditional: " + ", ".join(v.keys) + ")"
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v
