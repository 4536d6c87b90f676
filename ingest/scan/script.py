"""Stage 1a of ``tilake scan``: read a verl RL launch script without running it.

The script is lexed as bash (quotes, ``\\``-newline continuations, comments, heredocs,
``NAME=(...)`` arrays over several lines, ``$(...)``/``$((...))``/``${...}``), its plain
assignments are evaluated in order (``${VAR:-x}`` defaults, ``export``, ``+=``, ``$((a+b))``
integer arithmetic, ``"${ARR[@]}"`` and ``"$@"`` expansion), and the launch command
(``python3 -m verl.<module> ...``) is located with the source offsets of each of its words, so
stage 2 can insert text without touching any other byte.

Nothing is ever executed: ``$(...)`` and backticks, ``source``-d files, ``${v%pat}``-style
pattern expansions and assignments made inside ``if``/``for``/``case`` blocks or functions give
:class:`Unknown` values, which the extracted config reports as ``"unknown"`` — never guessed.

Facts about the config keys come from verl's Hydra configs (``verl/trainer/config/*.yaml``,
reference doc §4.1): ``actor_rollout_ref.actor.strategy`` (megatron | fsdp | fsdp2),
``actor_rollout_ref.rollout.name`` (vllm | sglang | hf), ``...megatron.{tensor,pipeline,
expert}_model_parallel_size``, ``data.{max_prompt_length,max_response_length,train_batch_size}``,
``trainer.total_training_steps``, ``actor_rollout_ref.rollout.{enforce_eager,
calculate_log_probs,n}``; ``ppo_megatron_trainer.yaml`` sets ``strategy: megatron`` and
``ppo_trainer.yaml`` (the default config of ``main_ppo``) sets ``strategy: fsdp``.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from tilake.errors import TilakeError

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


# ----------------------------------------------------------------------------------- lexer
@dataclass
class Token:
    """One lexical token of the script.

    Attributes:
        kind: ``word`` | ``op`` (``; | || && & ( )``) | ``redir`` (``2>&1``, ``> f``) | ``nl`` |
            ``array`` (``NAME=( ... )``).
        raw: exact source text (for ``redir``: operator plus target).
        start, end: character offsets in the script text (``text[start:end] == raw``).
        name, append, elements: for ``array`` tokens — the variable, ``+=``, element words.
    """

    kind: str
    raw: str
    start: int
    end: int
    name: str = ""
    append: bool = False
    elements: List["Token"] = field(default_factory=list)


_META = set("|&;()<>")
_REDIR_RE = re.compile(r"\d*(?:&>>|&>|>>|>&|<&|<<<|<<-|<<|>\||<>|>|<)")
_ASSIGN_PREFIX_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_KEY_RAW_RE = re.compile(r"^[+~]{0,2}([A-Za-z_][A-Za-z0-9_.]*)=")


class _Lexer:
    def __init__(self, text: str, path: str) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.path = path
        self.heredocs: List[Tuple[str, bool]] = []

    def error(self, msg: str) -> TilakeError:
        line = self.s.count("\n", 0, self.i) + 1
        return TilakeError(f"line {line}: {msg}", path=self.path)

    def tokens(self, stop_at_paren: bool = False) -> List[Token]:
        out: List[Token] = []
        s = self.s
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
                continue
            if c == "\\" and s.startswith("\\\n", self.i):
                self.i += 2
                continue
            if c == "#":
                j = s.find("\n", self.i)
                self.i = self.n if j < 0 else j
                continue
            if c == "\n":
                out.append(Token("nl", "\n", self.i, self.i + 1))
                self.i += 1
                if self.heredocs:
                    self._skip_heredocs()
                continue
            if stop_at_paren and c == ")":
                return out
            m = _REDIR_RE.match(s, self.i)
            if m and m.group(0).lstrip("0123456789") and (c in "<>" or c.isdigit() or s.startswith("&>", self.i)):
                op = m.group(0)
                start = self.i
                self.i = m.end()
                while self.i < self.n and s[self.i] in " \t":
                    self.i += 1
                target = ""
                if self.i < self.n and s[self.i] not in "\n;|&()":
                    wstart = self.i
                    self._read_word()
                    target = s[wstart:self.i]
                if (op.endswith("<<") or op.endswith("<<-")) and not op.endswith("<<<"):
                    delim = target.strip("'\"")
                    if delim:
                        self.heredocs.append((delim, op.endswith("-")))
                out.append(Token("redir", s[start:self.i], start, self.i))
                continue
            for op in ("&&", "||", ";;", "|&", ";", "|", "&", "(", ")"):
                if s.startswith(op, self.i):
                    out.append(Token("op", op, self.i, self.i + len(op)))
                    self.i += len(op)
                    break
            else:
                start = self.i
                arr = self._read_word()
                raw = s[start:self.i]
                if arr is not None:
                    name, append = arr
                    self.i += 1  # the '('
                    elems = [t for t in self.tokens(stop_at_paren=True) if t.kind == "word"]
                    if self.i >= self.n or s[self.i] != ")":
                        raise self.error(f"array {name}=( is never closed")
                    self.i += 1
                    out.append(Token("array", s[start:self.i], start, self.i, name=name,
                                     append=append, elements=elems))
                else:
                    out.append(Token("word", raw, start, self.i))
        if stop_at_paren:
            raise self.error("unbalanced '(' (array or subshell never closed)")
        return out

    def _skip_heredocs(self) -> None:
        s = self.s
        for delim, strip_tabs in self.heredocs:
            while self.i < self.n:
                j = s.find("\n", self.i)
                line = s[self.i:(self.n if j < 0 else j)]
                self.i = self.n if j < 0 else j + 1
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    break
        self.heredocs = []

    def _read_word(self) -> Optional[Tuple[str, bool]]:
        """Advance over one word; return (name, append) when it opens an array assignment."""
        s = self.s
        start = self.i
        while self.i < self.n:
            c = s[self.i]
            if c in " \t\r\n":
                break
            if c == "(" and self.i > start:
                m = _ASSIGN_PREFIX_RE.match(s[start:self.i])
                if m and m.end() == self.i - start:
                    return m.group(1), bool(m.group(2))
            if c in _META:
                break
            if c == "\\":
                self.i += 2
            elif c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.error("unterminated single quote")
                self.i = j + 1
            elif c == '"':
                self._skip_dquote()
            elif c == "`":
                j = s.find("`", self.i + 1)
                if j < 0:
                    raise self.error("unterminated backquote")
                self.i = j + 1
            elif c == "$" and self.i + 1 < self.n and s[self.i + 1] in "({":
                self._skip_dollar()
            else:
                self.i += 1
        return None

    def _skip_dquote(self) -> None:
        s = self.s
        self.i += 1
        while self.i < self.n:
            c = s[self.i]
            if c == "\\":
                self.i += 2
            elif c == '"':
                self.i += 1
                return
            elif c == "$" and self.i + 1 < self.n and s[self.i + 1] in "({":
                self._skip_dollar()
            elif c == "`":
                j = s.find("`", self.i + 1)
                self.i = self.n if j < 0 else j + 1
            else:
                self.i += 1
        raise self.error("unterminated double quote")

    def _skip_dollar(self) -> None:
        """Skip ``$(...)``, ``$((...))`` or ``${...}`` with nesting and quotes."""
        s = self.s
        open_c = s[self.i + 1]
        close_c = ")" if open_c == "(" else "}"
        depth = 0
        self.i += 1
        while self.i < self.n:
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == "'" and open_c == "(":
                j = s.find("'", self.i + 1)
                self.i = self.n if j < 0 else j + 1
                continue
            if c == '"':
                self._skip_dquote()
                continue
            if c == open_c:
                depth += 1
            elif c == close_c:
                depth -= 1
                if depth == 0:
                    self.i += 1
                    return
            self.i += 1
        raise self.error(f"unterminated ${open_c}")


# ------------------------------------------------------------------------------- expansion
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Multi(list):
    """Result of ``${ARR[@]}`` / ``$@``: several fields."""


class _Maybe:
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
        self.maybe_hits: List[_Maybe] = []

    # ---------------------------------------------------------------- parameters
    def lookup(self, name: str) -> Any:
        """Scalar/array/None for ``name`` (positional and special parameters included)."""
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.script_name
            return self.args[k - 1] if k <= len(self.args) else None
        if name in ("@", "*"):
            return _Multi(self.args)
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
                val = _Multi(val if isinstance(val, list) else ([] if val is None else [val]))
            else:
                idx = self.arith(sub)
                if isinstance(idx, Unknown):
                    val = idx
                elif isinstance(val, list):
                    i = int(idx)
                    val = val[i] if -len(val) <= i < len(val) else None
                elif int(idx) != 0:
                    val = None
        elif isinstance(val, list) and not isinstance(val, _Multi):
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
        ``"${A[@]}"`` give one field per element). An unknown ``key=...`` word keeps its key."""
        fields = self._expand(raw, split=True)
        m = _KEY_RAW_RE.match(raw)
        if m and len(fields) == 1 and isinstance(fields[0], Unknown) and fields[0].key is None:
            fields = [Unknown(fields[0].reason, key=m.group(1))]
        return fields

    def _expand(self, raw: str, split: bool, in_dquote: bool = False) -> List[Value]:
        fields: List[Value] = []
        cur: List[str] = []
        state = {"content": False, "unknown": None}

        def close() -> None:
            if state["unknown"] is not None:
                fields.append(state["unknown"])
            elif cur or state["content"]:
                fields.append("".join(cur))
            cur.clear()
            state["content"] = False
            state["unknown"] = None

        def add(value: Any, quoted: bool) -> None:
            if value is None:
                if quoted:
                    state["content"] = True
                return
            if isinstance(value, Unknown):
                state["unknown"] = state["unknown"] or value
                state["content"] = True
                return
            if isinstance(value, _Multi):
                self.maybe_hits.extend(it for it in value if isinstance(it, _Maybe))
                items = [it for it in value if not isinstance(it, _Maybe)]
                if not quoted:
                    items = [p for it in items for p in (it.split() if isinstance(it, str) else [it])]
                for k, it in enumerate(items):
                    if k:
                        close()
                    add(it, True)
                if not items and quoted:
                    pass
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
                    add(raw[i + 2:j].encode().decode("unicode_escape"), True)
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


# ------------------------------------------------------------------------------- commands
@dataclass
class Command:
    """One simple command: its word tokens, redirections, nesting and line."""

    words: List[Token]
    redirs: List[Token]
    line: int
    conditional: bool      # inside if/for/while/case/subshell
    in_function: bool
    arrays: List[Token] = field(default_factory=list)
    function: str = ""     # name of the enclosing function definition


_OPENERS = {"if": "fi", "for": "done", "while": "done", "until": "done", "case": "esac", "select": "done"}
_CLOSERS = {"fi", "done", "esac"}
_KEYWORDS = {"then", "else", "elif", "do", "!", "time"}


def _split_commands(tokens: List[Token], text: str) -> List[Command]:
    cmds: List[Command] = []
    depth = 0
    sub_depth = 0
    fn_depth = 0
    brace_stack: List[bool] = []   # True when the brace opened a function body
    pending_fn = False
    fn_name = ""
    words: List[Token] = []
    redirs: List[Token] = []
    arrays: List[Token] = []

    def flush() -> None:
        nonlocal words, redirs, arrays
        if words or arrays:
            first = (words or arrays)[0]
            cmds.append(Command(words, redirs, text.count("\n", 0, first.start) + 1,
                                depth > 0 or sub_depth > 0, fn_depth > 0, arrays,
                                fn_name if fn_depth > 0 else ""))
        words, redirs, arrays = [], [], []

    k = 0
    while k < len(tokens):
        t = tokens[k]
        if t.kind == "nl" or (t.kind == "op" and t.raw in (";", ";;", "&&", "||", "|", "|&", "&")):
            flush()
        elif t.kind == "op" and t.raw == "(":
            if words and len(words) == 1 and k + 1 < len(tokens) and tokens[k + 1].raw == ")":
                if fn_depth == 0:
                    fn_name = words[0].raw
                words = []          # name() { ... }  — function definition
                pending_fn = True
                k += 2
                continue
            flush()
            sub_depth += 1
        elif t.kind == "op" and t.raw == ")":
            flush()
            sub_depth = max(0, sub_depth - 1)
        elif t.kind == "redir":
            redirs.append(t)
        elif t.kind == "array":
            arrays.append(t)
        else:  # word
            if not words and not arrays:
                w = t.raw
                if w == "function":
                    pending_fn = True
                    if fn_depth == 0 and k + 1 < len(tokens):
                        fn_name = tokens[k + 1].raw.rstrip("()")
                    k += 2 if k + 1 < len(tokens) else 1
                    if k < len(tokens) and tokens[k].raw == "(":
                        k += 2
                    continue
                if w == "{":
                    brace_stack.append(pending_fn)
                    if pending_fn:
                        fn_depth += 1
                    pending_fn = False
                    k += 1
                    continue
                if w == "}":
                    if brace_stack and brace_stack.pop():
                        fn_depth = max(0, fn_depth - 1)
                    k += 1
                    continue
                if w in _OPENERS:
                    depth += 1
                    if w == "case":      # skip to 'in'; case bodies: patterns end with ')'
                        while k < len(tokens) and tokens[k].raw != "in":
                            k += 1
                    k += 1
                    continue
                if w in _CLOSERS:
                    depth = max(0, depth - 1)
                    k += 1
                    continue
                if w in _KEYWORDS:
                    k += 1
                    continue
            words.append(t)
        k += 1
    flush()
    return cmds


# ------------------------------------------------------------------------------- results
@dataclass
class LaunchCommand:
    """The located ``python -m verl...`` command.

    Attributes:
        module: e.g. ``verl.trainer.main_ppo``.
        line: 1-based line of its first word. words: its word tokens (source offsets).
        fields: expanded argument fields after the module (Unknown where not knowable).
        overrides: Hydra ``key -> value`` (leading ``+``/``++`` stripped; later wins).
        config_name: ``--config-name`` value or None. passthrough: ``$@``/``$*`` present.
        insert_at: offset where ``"${PROFILER[@]}"`` goes (after the last argument that is not
            ``$@``). insert_indent: indentation to use when the arguments are one per line, else None.
        conditional / in_function: where the command sits.
    """

    module: str
    line: int
    words: List[Token]
    fields: List[Value]
    overrides: Dict[str, Value]
    config_name: Optional[str]
    passthrough: bool
    insert_at: int
    insert_indent: Optional[str]
    conditional: bool
    in_function: bool


@dataclass
class ParsedScript:
    """Everything stage 1 learns from the script text.

    Attributes:
        path: resolved script path. text: its content. launch: the launch command.
        variables: final shell variables set by the script (strings; arrays as lists; Unknown
            → ``"unknown"``), excluding the inherited environment unless the script changed them.
        config: the extracted RL config (see :func:`extract_config`), each value a string/int/bool
            or ``"unknown"``. sources: where each config value came from.
        profiler: ``{"present": bool, "evidence": [...], "save_path": str|"unknown", "warnings": [...]}``.
        warnings: things the parser could not follow (sourced files, cd, other launch commands).
    """

    path: Path
    text: str
    launch: LaunchCommand
    variables: Dict[str, Any]
    config: Dict[str, Any]
    sources: Dict[str, str]
    profiler: Dict[str, Any]
    warnings: List[str]

    def run_id(self) -> str:
        """Deterministic run id from the resolved script path and the model id."""
        model = str(self.config.get("model_id", UNKNOWN))
        digest = hashlib.sha256(f"{self.path}\0{model}".encode()).hexdigest()[:10]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model.split("/")[-1]).strip("-.") or "model"
        return f"scan-{slug}-{digest}"


#: ``-m verl.<...>`` or a verl recipe entry point ``-m recipe.<name>.main_<...>`` (e.g. recipe.dapo.main_dapo)
_LAUNCH_MODULE_RE = re.compile(r"^(verl(\.[A-Za-z0-9_]+)+|recipe(\.[A-Za-z0-9_]+)*\.main_[A-Za-z0-9_]+)$")
_PASSTHROUGH_RAW = {"$@", '"$@"', "$*", '"$*"', "${@}", '"${@}"'}


def _plain(v: Any) -> Any:
    if isinstance(v, Unknown):
        return UNKNOWN
    if isinstance(v, _Maybe):
        return "unknown (conditional: " + ", ".join(v.keys) + ")"
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def parse_script(path: Union[str, Path], env: Optional[Mapping[str, str]] = None,
                 args: Sequence[str] = ()) -> ParsedScript:
    """Parse a verl launch script (no execution).

    Args:
        path: the bash script.
        env: environment the script would run with (default: ``os.environ``); ``${VAR:-x}``
            takes the environment's value when set, like bash.
        args: positional arguments the script would receive (``$@``).
    Returns:
        :class:`ParsedScript`.
    Raises:
        TilakeError: the path does not exist / is not a readable text file / has unbalanced
            quoting, or no ``python -m verl...`` launch command is found.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise TilakeError("no such file", path=p)
    if not p.is_file():
        raise TilakeError("not a file (expected an RL launch script)", path=p)
    p = p.resolve()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise TilakeError(f"cannot read the script: {exc.strerror}", path=p) from exc
    if b"\0" in data[:8192]:
        raise TilakeError("binary file, not a launch script", path=p)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TilakeError("not UTF-8 text, not a launch script", path=p) from exc
    env = dict(os.environ if env is None else env)
    lexer = _Lexer(text, str(p))
    tokens = lexer.tokens()
    cmds = _split_commands(tokens, text)
    shell = Shell(env, args, str(p))
    warnings: List[str] = []
    launches: List[Tuple[Command, int]] = []
    fn_assigns: Dict[str, set] = {}

    for cmd in cmds:
        if cmd.in_function:
            names = fn_assigns.setdefault(cmd.function, set())
            names.update(a.name for a in cmd.arrays)
            names.update(m.group(1) for m in (_ASSIGN_PREFIX_RE.match(w.raw) for w in cmd.words) if m)
            idx = _find_launch(cmd, shell) if cmd.words else None
            if idx is not None:
                launches.append((cmd, idx))
            continue
        if cmd.words and cmd.words[0].raw in fn_assigns:
            for name in fn_assigns[cmd.words[0].raw]:
                shell.vars[name] = Unknown(f"{name} may be set by function {cmd.words[0].raw} "
                                           f"(called on line {cmd.line})")
        uncertain = cmd.conditional or cmd.in_function
        where = "a function body" if cmd.in_function else "a conditional block"
        words = [w.raw for w in cmd.words]
        # array assignments (possibly several: A=(..) B=(..))
        if cmd.arrays and not words:
            for arr in cmd.arrays:
                old = shell.vars.get(arr.name)
                if uncertain and arr.append and isinstance(old, list) and not cmd.in_function:
                    keys = [m.group(1) for m in (_KEY_RAW_RE.match(e.raw) for e in arr.elements) if m]
                    shell.vars[arr.name] = list(old) + [_Maybe(keys, f"{arr.name}+=( ... ) inside {where} "
                                                                     f"(line {cmd.line}) may set it")]
                    continue
                if uncertain:
                    shell.vars[arr.name] = Unknown(f"{arr.name} assigned inside {where} (line {cmd.line})")
                    continue
                elems: List[Value] = []
                for e in arr.elements:
                    elems.extend(shell.expand_word(e.raw))
                old = shell.vars.get(arr.name)
                if arr.append and isinstance(old, list):
                    elems = list(old) + elems
                shell.vars[arr.name] = elems
            continue
        if not words:
            continue
        # locate a launch command before evaluating anything else
        idx = _find_launch(cmd, shell)
        if idx is not None:
            launches.append((cmd, idx))
            continue
        head = words[0]
        assigns = []
        j = 0
        while j < len(words) and _ASSIGN_PREFIX_RE.match(words[j]):
            assigns.append(cmd.words[j])
            j += 1
        if j == len(words):
            for t in assigns:
                _assign(shell, t.raw, uncertain, where, cmd.line)
            continue
        head = words[j]
        if head in ("export", "declare", "typeset", "local", "readonly") and not uncertain:
            for t in cmd.words[j + 1:]:
                if t.raw.startswith("-"):
                    continue
                if _ASSIGN_PREFIX_RE.match(t.raw):
                    _assign(shell, t.raw, uncertain, where, cmd.line)
                    if head == "export":
                        shell.exported.add(_ASSIGN_PREFIX_RE.match(t.raw).group(1))
            for arr in cmd.arrays:
                elems = [f for e in arr.elements for f in shell.expand_word(e.raw)]
                shell.vars[arr.name] = elems
        elif head in ("export", "declare", "typeset", "local", "readonly"):
            for t in cmd.words[j + 1:]:
                m = _ASSIGN_PREFIX_RE.match(t.raw)
                if m:
                    shell.vars[m.group(1)] = Unknown(f"{m.group(1)} assigned inside {where} (line {cmd.line})")
        elif head == "unset" and not uncertain:
            for t in cmd.words[j + 1:]:
                if not t.raw.startswith("-"):
                    shell.vars.pop(t.raw, None)
        elif head in ("source", "."):
            warnings.append(f"line {cmd.line}: sources {' '.join(words[j + 1:])}: variables set there "
                            "are not seen by the parser")
        elif head == "cd":
            warnings.append(f"line {cmd.line}: changes directory ({' '.join(words[j + 1:])}): relative "
                            "paths after it are resolved from the script's folder")
        elif head == "shift" and not uncertain:
            shell.args = shell.args[1:]
        elif head == "set" and len(words) > j + 1 and words[j + 1] == "--":
            shell.args = [f if isinstance(f, str) else "" for w in words[j + 2:] for f in shell.expand_word(w)]

    if not launches:
        raise TilakeError("not a verl launch script: no `python -m verl...` command found", path=p,
                          hint="pass the bash script that runs python3 -m verl.trainer.main_ppo")
    plain = [lc for lc in launches if not lc[0].conditional and not lc[0].in_function]
    chosen_cmd, idx = (plain or launches)[-1]
    for other, _ in launches:
        if other is not chosen_cmd:
            warnings.append(f"line {other.line}: another verl launch command; the one on line "
                            f"{chosen_cmd.line} is used")
    launch = _build_launch(chosen_cmd, idx, shell, text)

    variables = {}
    for k, v in shell.vars.items():
        if k in env and env[k] == v:
            continue
        variables[k] = _plain(v)
    config, sources = extract_config(launch, shell, p)
    prof = _profiler_info(text, launch, shell)
    return ParsedScript(p, text, launch, variables, config, sources, prof, warnings)


def _assign(shell: Shell, raw: str, uncertain: bool, where: str, line: int) -> None:
    m = _ASSIGN_PREFIX_RE.match(raw)
    name, append = m.group(1), bool(m.group(2))
    if uncertain:
        shell.vars[name] = Unknown(f"{name} assigned inside {where} (line {line})")
        return
    value = shell.expand_string(raw[m.end():])
    if append:
        old = shell.vars.get(name)
        if isinstance(old, list):
            shell.vars[name] = list(old) + [value]
            return
        if isinstance(old, Unknown) or isinstance(value, Unknown):
            value = old if isinstance(old, Unknown) else value
        else:
            value = (old or "") + value
    shell.vars[name] = value


def _find_launch(cmd: Command, shell: Shell) -> Optional[int]:
    """Index of the word holding the verl module name (``-m verl.x``), or None."""
    for k, w in enumerate(cmd.words[:-1]):
        if w.raw == "-m":
            mod = shell.expand_string(cmd.words[k + 1].raw)
            if isinstance(mod, str) and _LAUNCH_MODULE_RE.match(mod):
                return k + 1
    return None


def _build_launch(cmd: Command, idx: int, shell: Shell, text: str) -> LaunchCommand:
    module = shell.expand_string(cmd.words[idx].raw)
    fields: List[Value] = []
    overrides: Dict[str, Value] = {}
    config_name: Optional[str] = None
    passthrough = False
    arg_tokens = cmd.words[idx + 1:]
    last_arg: Optional[Token] = None
    shell.maybe_hits = []
    expect_config_name = False
    for t in arg_tokens:
        if t.raw in _PASSTHROUGH_RAW:
            passthrough = True
        else:
            last_arg = t
        for f in shell.expand_word(t.raw):
            fields.append(f)
            if isinstance(f, Unknown):
                if f.key:
                    overrides[f.key] = f
                continue
            if expect_config_name:
                config_name, expect_config_name = f, False
                continue
            if f == "--config-name":
                expect_config_name = True
                continue
            if f.startswith("--config-name="):
                config_name = f.split("=", 1)[1]
                continue
            if f.startswith("-"):
                continue
            m = re.match(r"^[+]{0,2}([A-Za-z0-9_.@/\-]+)=(.*)$", f, re.S)
            if m:
                overrides[m.group(1)] = m.group(2)
    for maybe in shell.maybe_hits:
        for key in maybe.keys:
            overrides[key.lstrip("+")] = Unknown(maybe.reason, key=key.lstrip("+"))
    anchor = last_arg or cmd.words[idx]
    insert_at = anchor.end
    indent = None
    line_start = text.rfind("\n", 0, anchor.start) + 1
    prefix = text[line_start:anchor.start]
    if re.match(r"[ \t]*\\\r?\n", text[insert_at:]) and prefix.strip() == "":
        indent = prefix   # one argument per line: the new argument gets its own line
    return LaunchCommand(module, cmd.line, cmd.words, fields, overrides, config_name, passthrough,
                         insert_at, indent, cmd.conditional, cmd.in_function)


# ---------------------------------------------------------------------------- config
_BOOL = {"true": True, "false": False}


def _typed(v: Value) -> Any:
    if isinstance(v, Unknown):
        return UNKNOWN
    s = v.strip().strip("'\"")
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    if s.lower() in _BOOL:
        return _BOOL[s.lower()]
    return s


def extract_config(launch: LaunchCommand, shell: Shell, script: Path) -> Tuple[Dict[str, Any], Dict[str, str]]:
    """The stage-1 table of the seed (训练后端, 推理引擎, 模型路径/ID, TP/PP/EP, lengths, batch, steps,
    NPU devices, rollout options) from the launch overrides and shell variables.

    Returns:
        ``(config, sources)``: config values (int/bool/str or ``"unknown"``; ``hydra_overrides``
        holds every override as text) and, per key, where the value came from.
    """
    ov = launch.overrides
    cfg: Dict[str, Any] = {}
    src: Dict[str, str] = {}

    def from_key(name: str, *keys: str) -> None:
        for k in keys:
            if k in ov:
                cfg[name] = _typed(ov[k])
                src[name] = f"override {k}" + (f" ({ov[k].reason})" if isinstance(ov[k], Unknown) else "")
                return
        cfg[name] = UNKNOWN
        src[name] = "not set in the script (" + " / ".join(keys) + ")"

    from_key("train_backend", "actor_rollout_ref.actor.strategy")
    cname = (launch.config_name or "").strip("'\"")
    if cfg["train_backend"] == UNKNOWN:
        if cname.startswith("ppo_megatron_trainer"):
            cfg["train_backend"], src["train_backend"] = "megatron", \
                f"--config-name {cname} (verl sets actor.strategy: megatron there)"
        elif cname in ("", "ppo_trainer", "ppo_trainer.yaml") and launch.module == "verl.trainer.main_ppo":
            cfg["train_backend"], src["train_backend"] = "fsdp", \
                f"config {cname or 'ppo_trainer (default of main_ppo)'} (verl sets actor.strategy: fsdp there)"
    from_key("infer_backend", "actor_rollout_ref.rollout.name")
    from_key("model_path", "actor_rollout_ref.model.path")
    if cfg["model_path"] == UNKNOWN and isinstance(shell.vars.get("MODEL_PATH"), str):
        cfg["model_path"], src["model_path"] = shell.vars["MODEL_PATH"], "variable MODEL_PATH"
    mid = shell.vars.get("MODEL_ID")
    mp = cfg["model_path"]
    if isinstance(mid, str) and mid:
        cfg["model_id"], src["model_id"] = mid, "variable MODEL_ID"
    elif isinstance(mp, str) and mp != UNKNOWN and re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", mp) \
            and not (script.parent / mp).exists():
        cfg["model_id"], src["model_id"] = mp, "model path is a hub id"
    elif isinstance(mp, str) and mp != UNKNOWN:
        cfg["model_id"], src["model_id"] = Path(mp.rstrip("/")).name, "last component of the model path"
    else:
        cfg["model_id"], src["model_id"] = UNKNOWN, "no MODEL_ID variable and model path unknown"
    is_megatron = cfg["train_backend"] == "megatron"
    for name, leaf in (("tp", "tensor_model_parallel_size"), ("pp", "pipeline_model_parallel_size"),
                       ("ep", "expert_model_parallel_size"), ("cp", "context_parallel_size")):
        from_key(f"train_{name}", f"actor_rollout_ref.actor.megatron.{leaf}")
        if cfg[f"train_{name}"] == UNKNOWN and is_megatron:
            # ppo_megatron_trainer.yaml defaults every *_model_parallel_size to 1 (verl actor/megatron_actor.yaml)
            cfg[f"train_{name}"], src[f"train_{name}"] = 1, f"verl megatron default ({leaf}: 1)"
    from_key("infer_tp", "actor_rollout_ref.rollout.tensor_model_parallel_size")
    from_key("infer_dp", "actor_rollout_ref.rollout.data_parallel_size")
    from_key("infer_ep", "actor_rollout_ref.rollout.expert_parallel_size")
    from_key("infer_enable_expert_parallel", "actor_rollout_ref.rollout.enable_expert_parallel")
    from_key("max_prompt_length", "data.max_prompt_length")
    from_key("max_response_length", "data.max_response_length")
    from_key("train_batch_size", "data.train_batch_size")
    from_key("total_training_steps", "trainer.total_training_steps")
    from_key("total_epochs", "trainer.total_epochs")
    from_key("n_gpus_per_node", "trainer.n_gpus_per_node")
    from_key("nnodes", "trainer.nnodes")
    from_key("device", "trainer.device")
    from_key("rollout_enforce_eager", "actor_rollout_ref.rollout.enforce_eager")
    from_key("rollout_calculate_log_probs", "actor_rollout_ref.rollout.calculate_log_probs")
    from_key("rollout_n", "actor_rollout_ref.rollout.n")
    from_key("rollout_mode", "actor_rollout_ref.rollout.mode")
    from_key("adv_estimator", "algorithm.adv_estimator")
    vis = shell.vars.get("ASCEND_RT_VISIBLE_DEVICES")
    if vis is None:
        cfg["visible_devices"], src["visible_devices"] = UNKNOWN, "ASCEND_RT_VISIBLE_DEVICES not set (all NPUs visible)"
    else:
        cfg["visible_devices"] = _plain(vis)
        src["visible_devices"] = ("variable ASCEND_RT_VISIBLE_DEVICES" if "ASCEND_RT_VISIBLE_DEVICES" in shell.exported
                                  else "ASCEND_RT_VISIBLE_DEVICES (not exported)")
    cfg["config_name"] = cname or UNKNOWN
    cfg["launch_module"] = launch.module
    cfg["passthrough_args"] = launch.passthrough
    cfg["hydra_overrides"] = {k: (UNKNOWN if isinstance(v, Unknown) else v) for k, v in ov.items()}
    return cfg, src


def _profiler_info(text: str, launch: LaunchCommand, shell: Shell) -> Dict[str, Any]:
    ov = launch.overrides
    evidence = []
    keys = [k for k in ov if k.startswith("global_profiler.") or ".profiler." in k
            or k.startswith("profile.") or k.startswith("trainer.profile")]
    if keys:
        evidence.append(f"{len(keys)} profiler overrides on the launch command")
    if re.search(r"global_profiler", text):
        evidence.append("the text mentions global_profiler")
    if re.search(r"^\s*PROFILER\+?=\(", text, re.M):
        evidence.append("a PROFILER=( ... ) array is defined")
    warnings: List[str] = []
    save = ov.get("global_profiler.save_path")
    if re.search(r"^\s*PROFILER\+?=\(", text, re.M) and not any("PROFILER[" in w.raw for w in launch.words):
        warnings.append("a PROFILER array is defined but not passed to the launch command")
    if keys:
        if ov.get("global_profiler.tool") not in (None, "npu") and not isinstance(ov.get("global_profiler.tool"), Unknown):
            warnings.append(f"global_profiler.tool={ov['global_profiler.tool']} (expected npu)")
        for role in ("actor", "ref", "rollout"):
            lvl = ov.get(f"actor_rollout_ref.{role}.profiler.tool_config.npu.level")
            if lvl is None or lvl == "level0":
                warnings.append(f"{role} profiler level is {lvl or 'the verl default level0'}: op types "
                                "are not collected at level0 (they are derived from kernel names)")
        if str(ov.get("actor_rollout_ref.rollout.profiler.tool_config.npu.discrete", "")).strip("'\"") != "True":
            warnings.append("rollout profiler discrete is not True: vLLM-side operators may not be captured")
        if save is None:
            warnings.append("global_profiler.save_path not set on the launch command")
    return {"present": bool(evidence), "evidence": evidence, "override_keys": keys,
            "save_path": UNKNOWN if save is None or isinstance(save, Unknown) else save,
            "warnings": warnings}


def config_json(parsed: ParsedScript) -> str:
    """The parsed config as stable JSON (stored as ``runs.rl_config``)."""
    return json.dumps({"config": parsed.config, "sources": parsed.sources}, ensure_ascii=False, sort_keys=True)
