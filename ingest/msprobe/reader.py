"""Reading msprobe dumps: folder layout, ``dump.json`` / ``construct.json`` / ``stack.json``, lazy ``.pt``.

Format facts (source: ``shared/reference/msprobe-format.md`` §2–3, checked against the real
``mindstudio-probe==26.2.0`` dumps in ``shared/fixtures/dumps``):

* layout ``<root>/step{S}/rank{R}/`` (distributed) or ``<root>/step{S}/proc{pid}/`` (26.x, not
  distributed); a re-run adds a second ``proc*`` folder, which is ambiguous and refused here.
* ``dump.json`` = ``{"task", "level", "framework"?, "dump_data_dir", "data": {entry: {...}}}``;
  entry keys are in *completion* order (a module's entry comes after its child APIs).
* ``construct.json`` maps node → parent: ``null`` root (26.x), ``""`` root (8.x), or
  ``[parent, micro_step]`` under Megatron pipeline schedules (plus a ``megatron_micro_step_number``
  key). Its key order is the *call* order, which is what we use as execution order.
* ``stack.json`` is ``{"0": [[names...], [frames...]]}`` (26.x, deduplicated) or
  ``{name: [frames...]}`` (8.x).
* a tensor slot is ``{"type": "torch.Tensor", "dtype": "torch.bfloat16", "shape": [...],
  "data_name": "<entry>.<io>.<i>.pt", ...}``; ``output`` is a list (dict outputs kept as dicts).

Tensors are only read on demand (:meth:`DumpSide.load`), one at a time, with
``torch.load(weights_only=True)``: a ``.pt`` whose pickle needs anything beyond plain tensors is
refused with torch's reason, never executed.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from tilake.errors import TilakeError
from tilake.ingest.inputs import check_regular, open_regular, within

API_RE = re.compile(r"^(?P<api>.+)\.(?P<counter>\d+)\.(?P<dir>forward|backward)$")
MODULE_RE = re.compile(r"^Module\.(?P<path>.+)\.(?P<cls>[^.]+)\.(?P<dir>forward|backward)\.(?P<call>\d+)$")


@dataclass
class Slot:
    """One tensor slot of one dump entry (a row of ``tensor_stats``).

    Attributes:
        entry: dump.json key (``Module.model.layers.0.mlp.Qwen3MLP.forward.0`` / ``Tensor.__add__.6.forward``).
        io: ``input`` | ``kwarg`` | ``output`` | ``parameter`` | ``parameters_grad``.
        index: positional index or kwarg/parameter name path (``0``, ``hidden_states``,
            ``position_embeddings.0``, ``0.last_hidden_state``).
        declared_dtype / declared_shape: what dump.json says (the file is the truth).
        data_name: the ``.pt`` file name in ``dump_tensor_data`` (None for statistics dumps).
        exec_order: call order of the entry (construct.json key order; dump.json order if absent).
        declared_stats: msprobe's own summary of the slot as dump.json gives it (``Max``, ``Min``,
            ``Mean``, ``Norm``; ``md5`` under ``summary_mode: md5``), empty when absent.
    """

    entry: str
    io: str
    index: str
    declared_dtype: Optional[str]
    declared_shape: Optional[List[int]]
    data_name: Optional[str]
    exec_order: int
    declared_stats: Dict[str, Any] = field(default_factory=dict)


def _is_tensor(v: Any) -> bool:
    return isinstance(v, dict) and v.get("type") == "torch.Tensor"


def _walk(value: Any, prefix: str) -> Iterator[Tuple[str, dict]]:
    """Yield (index path, tensor dict) for every tensor inside a dump.json value."""
    if _is_tensor(value):
        yield prefix, value
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk(v, f"{prefix}.{i}" if prefix else str(i))
    elif isinstance(value, dict) and "type" not in value:
        for k, v in value.items():
            yield from _walk(v, f"{prefix}.{k}" if prefix else str(k))


def parse_parent(value: Any) -> Optional[str]:
    """Normalise a construct.json parent: ``null``/``""`` → None, ``[parent, micro_step]`` → parent."""
    if isinstance(value, list):
        value = value[0] if value else None
    if value in (None, ""):
        return None
    return str(value)


def locate_rank_dirs(path: Path) -> List[Path]:
    """Resolve a user path to the ``step*/rank*|proc*`` folders holding ``dump.json``.

    Accepts the rank folder itself, a ``step*`` folder, or a dump root (``<root>/step*/...``).
    Returns one folder per step (sorted by step number).

    Raises:
        TilakeError: path missing; no dump.json anywhere; several ``proc*``/``rank*`` folders in
            one step (ambiguous — the user must pick one).
    """
    path = Path(path)
    if not path.exists():
        raise TilakeError("dump path does not exist", path=path)
    if (path / "dump.json").is_file():
        return [path]
    if path.is_file():
        if path.name == "dump.json":
            return [path.parent]
        raise TilakeError("not a dump folder (expected a folder holding dump.json)", path=path)

    def rank_dirs(step_dir: Path) -> List[Path]:
        return sorted(d for d in step_dir.iterdir()
                      if d.is_dir() and re.match(r"^(rank\d*|proc\d+)$", d.name) and (d / "dump.json").is_file())

    if re.match(r"^step\d+$", path.name):
        steps = [path]
    else:
        steps = sorted((d for d in path.iterdir() if d.is_dir() and re.match(r"^step\d+$", d.name)),
                       key=lambda d: int(d.name[4:]))
    out = []
    for s in steps:
        rd = rank_dirs(s)
        if len(rd) > 1:
            names = ", ".join(d.name for d in rd)
            raise TilakeError(f"{len(rd)} rank/proc folders in one step ({names}): ambiguous",
                              path=s, hint="pass the one folder to analyse, e.g. " + str(rd[0]))
        out.extend(rd)
    if not out:
        raise TilakeError("no dump.json found (expected <root>/step*/rank*|proc*/dump.json)", path=path)
    return out


def _read_json(p: Path, what: str) -> Any:
    check_regular(p, what)             # a FIFO there would block the read forever
    try:
        with open_regular(p, what) as raw:
            return json.loads(raw.read().decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise TilakeError(f"{what} is not valid JSON (line {exc.lineno}: {exc.msg})", path=p) from exc
    except UnicodeDecodeError as exc:   # random bytes: say where, in the file's terms
        raise TilakeError(f"{what} is not UTF-8 text ({_bad_bytes(p, exc)})", path=p) from None
    except RecursionError:   # e.g. 200,000 nested arrays: no msprobe dump nests more than a few levels
        raise TilakeError(f"{what} nests too deeply to be an msprobe dump (more than "
                          f"{sys.getrecursionlimit()} levels of arrays/objects)", path=p) from None
    except OSError as exc:
        raise TilakeError(f"cannot read {what}: {exc.strerror}", path=p) from exc


def _bad_bytes(p: Path, exc: UnicodeDecodeError) -> str:
    """``"line L, byte offset B: b'…'"`` of the first bytes of ``p`` that are not UTF-8 (the decoder's
    own ``start`` counts from its read buffer, not the file)."""
    data = Path(p).read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        return f"line {line}, byte offset {e.start}: {data[e.start:e.start + 4]!r}"
    return exc.reason


class DumpSide:
    """One side (train or infer) of a dump: one ``step*/rank*|proc*`` folder.

    Args:
        path: the dump root, a ``step*`` folder or the rank folder (see :func:`locate_rank_dirs`).
        side: ``train`` | ``infer`` (used in messages).
        step: which step folder when the root holds several (default: the first).
    Attributes:
        dir: the rank folder. meta: dump.json top level without ``data``. entries: entry → dict.
        parents: construct.json (entry → parent, normalised). order: entry → execution order.
        slots: every tensor slot, in execution order. step / rank: parsed from folder names
        (None when not encoded). warnings: format notes (missing construct.json, etc.).
    Raises:
        TilakeError: unreadable/invalid dump.json; a dump with 0 entries ("infer side has 0 entries").
    """

    def __init__(self, path: Path, side: str = "train", step: Optional[int] = None) -> None:
        dirs = locate_rank_dirs(Path(path))
        if step is not None:
            dirs = [d for d in dirs if d.parent.name == f"step{step}"] or dirs[:0]
            if not dirs:
                raise TilakeError(f"no step{step} folder in the {side} dump", path=path)
        self.dir = dirs[0]
        self.side = side
        self.warnings: List[str] = []
        # (data_name, dump.json dtype, file dtype) of every loaded .pt whose dtype differs (:meth:`dtype_note`)
        self.dtype_mismatches: List[Tuple[str, str, str]] = []
        m = re.match(r"^step(\d+)$", self.dir.parent.name)
        self.step = int(m.group(1)) if m else None
        m = re.match(r"^rank(\d+)$", self.dir.name)
        self.rank = int(m.group(1)) if m else None
        self.proc = self.dir.name if self.dir.name.startswith("proc") else None
        dj = _read_json(self.dir / "dump.json", "dump.json")
        if not isinstance(dj, dict) or not isinstance(dj.get("data"), dict):
            raise TilakeError("dump.json has no 'data' object (not an msprobe dump)", path=self.dir / "dump.json")
        self.meta = {k: v for k, v in dj.items() if k != "data"}
        self.entries: Dict[str, dict] = {k: v for k, v in dj["data"].items() if isinstance(v, dict)}
        if not self.entries:
            raise TilakeError(f"{side} side has 0 entries in dump.json (nothing was dumped)",
                              path=self.dir / "dump.json",
                              hint="check the msprobe config (step/rank/scope/list) of that side")
        self.data_dir = self.dir / "dump_tensor_data"
        cpath = self.dir / "construct.json"
        self.parents: Dict[str, Optional[str]] = {}
        self.construct_variant = "absent"
        construct_order: List[str] = []
        if cpath.is_file():
            cj = _read_json(cpath, "construct.json")
            if isinstance(cj, dict):
                for k, v in cj.items():
                    if k == "megatron_micro_step_number":
                        self.construct_variant = "megatron"
                        continue
                    if isinstance(v, list) and self.construct_variant != "megatron":
                        self.construct_variant = "megatron"
                    elif v == "" and self.construct_variant == "absent":
                        self.construct_variant = "8.x"
                    self.parents[k] = parse_parent(v)
                    construct_order.append(k)
                if self.construct_variant == "absent":
                    self.construct_variant = "26.x" if construct_order else "empty"
        else:
            self.warnings.append("construct.json absent: execution order taken from dump.json key order "
                                 "(completion order) and API parents unknown")
        self.stack_variant = self._stack_variant()
        # execution order: construct.json call order; entries it lacks go by dump.json order after it
        rank = {k: i for i, k in enumerate(construct_order)}
        dump_keys = list(self.entries)
        base = len(construct_order)
        self.order: Dict[str, int] = {}
        for i, k in enumerate(dump_keys):
            self.order[k] = rank.get(k, base + i)
        if construct_order:
            self._check_dump_order(dump_keys, rank)
        self.slots: List[Slot] = []
        for k in sorted(self.entries, key=lambda e: self.order[e]):
            self.slots.extend(self._entry_slots(k))
        self._by_key = {(s.entry, s.io, s.index): s for s in self.slots}
        self._by_data_name = {s.data_name: s for s in self.slots if s.data_name}

    # ------------------------------------------------------------------ metadata
    def _stack_variant(self) -> str:
        p = self.dir / "stack.json"
        if not p.is_file():
            return "absent"
        try:
            sj = _read_json(p, "stack.json")
        except TilakeError as exc:
            self.warnings.append(str(exc))
            return "invalid"
        if not isinstance(sj, dict) or not sj:
            return "empty"
        first = next(iter(sj.values()))
        if isinstance(first, list) and len(first) == 2 and all(isinstance(x, list) for x in first):
            return "26.x"
        return "8.x"

    def _check_dump_order(self, dump_keys: List[str], rank: Dict[str, int]) -> None:
        """Warn when dump.json lists entries in an order that is not a completion order.

        A completion order only ever puts a parent after its children; any other inversion
        against construct.json's call order means the file was reordered.
        """
        bad = 0
        for a, b in zip(dump_keys, dump_keys[1:]):
            if a in rank and b in rank and rank[a] > rank[b]:
                # allowed: a child (b) finishing... no: a parent finishing before a later child is
                # impossible; the only allowed inversion is b being an ancestor of a
                anc = self.parents.get(a)
                seen = set()
                while anc and anc not in seen:
                    if anc == b:
                        break
                    seen.add(anc)
                    anc = self.parents.get(anc)
                else:
                    bad += 1
        if bad:
            self.warnings.append(f"dump.json lists entries out of execution order ({bad} inversions "
                                 "against construct.json); construct.json call order is used")

    def _entry_slots(self, entry: str) -> List[Slot]:
        e = self.entries[entry]
        out = []
        groups = (("input", e.get("input_args", e.get("input"))), ("kwarg", e.get("input_kwargs")),
                  ("output", e.get("output")), ("parameter", e.get("parameters")))
        if entry.endswith(".parameters_grad"):
            # Megatron/MindSpeed dumps: ``<Module...>.parameters_grad`` = {param name: [tensor]}
            # (shared/fixtures/real_public/dump_lm_compare_statistics/pt/dump.json)
            groups = (("parameters_grad", e),)
        for io, val in groups:
            if val is None:
                continue
            for idx, t in _walk(val, ""):
                stats = {k: t.get(k) for k in ("Max", "Min", "Mean", "Norm", "md5") if k in t}
                dn = t.get("data_name")   # a non-string name (hostile JSON) is kept as text; pt_path judges it
                out.append(Slot(entry, io, idx, t.get("dtype"), t.get("shape"),
                                dn if dn is None or isinstance(dn, str) else json.dumps(dn),
                                self.order[entry], stats))
        return out

    # ------------------------------------------------------------------ lookup
    def slot(self, entry: str, io: str, index: str) -> Optional[Slot]:
        """The slot ``(entry, io, index)`` or None."""
        return self._by_key.get((entry, io, str(index)))

    def api_name(self, entry: str) -> Optional[str]:
        """``Tensor.__add__.6.forward`` → ``Tensor.__add__`` (None for module entries)."""
        if entry.startswith("Module."):
            return None
        m = API_RE.match(entry)
        return m.group("api") if m else None

    def children(self, parent: str) -> List[str]:
        """Dumped entries whose construct.json parent is ``parent``, in execution order."""
        if not hasattr(self, "_kids"):
            kids: Dict[Optional[str], List[str]] = {}
            for k, p in self.parents.items():
                if k in self.entries:
                    kids.setdefault(p, []).append(k)
            for v in kids.values():
                v.sort(key=lambda k: self.order[k])
            self._kids = kids
        return list(self._kids.get(parent, []))

    def pt_path(self, slot: Slot) -> Path:
        """Where the slot's ``.pt`` lives (``dump_tensor_data/<data_name>``).

        ``data_name`` must be a plain file name (msprobe writes ``<entry>.<io>.<i>.pt``): a name
        with a path separator, ``..``, an absolute path or a NUL byte is refused and never opened,
        so a crafted ``dump.json`` cannot make tilake read (and report on) a file outside the dump.

        Raises:
            TilakeError: the dump holds statistics only (no ``data_name``); ``data_name`` is not a
                plain file name; the ``.pt`` or ``dump_tensor_data/`` is a symlink that leads out of the
                dump folder (never read).
        """
        name = slot.data_name
        if not name:
            raise TilakeError(f"{slot.entry} {slot.io}.{slot.index} has no data_name "
                              "(statistics-only dump: task must be 'tensor')", path=self.dir / "dump.json")
        if (not isinstance(name, str) or name in (".", "..") or "/" in name or "\\" in name or "\0" in name
                or Path(name).name != name):
            raise TilakeError(f"refused: {slot.entry} {slot.io}.{slot.index} has data_name {str(name)[:200]!r}, "
                              "not a plain file name inside dump_tensor_data/ (never opened)",
                              path=self.dir / "dump.json")
        path = self.data_dir / name
        if (path.is_symlink() or self.data_dir.is_symlink()) and not within(path, self.dir):
            import os

            link = self.data_dir if not within(self.data_dir, self.dir) else path
            raise TilakeError(f"refused: {slot.entry} {slot.io}.{slot.index}: {link.name}"
                              f"{'/' if link == self.data_dir else ''} is a symlink that leads out of the dump "
                              f"(to {os.path.realpath(link)}); never read", path=path)
        return path

    def load(self, slot: Slot):
        """Load one slot's tensor (see :func:`load_pt`). A file whose dtype differs from what
        dump.json declares is used as it is and recorded in ``dtype_mismatches`` (:meth:`dtype_note`)."""
        t = load_pt(self.pt_path(slot))
        if slot.declared_dtype and slot.declared_dtype != str(t.dtype) and \
                all(m[0] != slot.data_name for m in self.dtype_mismatches):
            self.dtype_mismatches.append((str(slot.data_name), str(slot.declared_dtype), str(t.dtype)))
        return t

    def dtype_note(self) -> Optional[str]:
        """One sentence on the loaded ``.pt`` files whose dtype is not the one dump.json declares
        (``"train: 3 .pt files hold another dtype than dump.json declares (X.pt: dump.json
        torch.float16, file torch.bfloat16; …); the files' dtypes are used"``), or None."""
        if not self.dtype_mismatches:
            return None
        eg = "; ".join(f"{n}: dump.json {d}, file {a}" for n, d, a in self.dtype_mismatches[:3])
        more = ", …" if len(self.dtype_mismatches) > 3 else ""
        return (f"{self.side}: {len(self.dtype_mismatches)} .pt file(s) hold another dtype than dump.json declares "
                f"({eg}{more}); the files' dtypes are used")

    def stack_frames(self) -> Dict[str, List[str]]:
        """entry → frames (innermost first) for both stack.json forms; {} when absent."""
        p = self.dir / "stack.json"
        if not p.is_file():
            return {}
        sj = _read_json(p, "stack.json")
        out: Dict[str, List[str]] = {}
        for k, v in (sj or {}).items():
            if isinstance(v, list) and len(v) == 2 and all(isinstance(x, list) for x in v):
                for name in v[0]:
                    out[name] = v[1]
            elif isinstance(v, list):
                out[k] = v
        return out


def load_pt(path: Path):
    """Load one msprobe ``.pt`` safely and return a CPU tensor.

    Uses ``torch.load(map_location="cpu", weights_only=True, mmap=True)`` (mmap falls back to a
    plain read for legacy non-zip files). NPU-written files load when they hold plain tensors
    (msprobe saves ``tensor.cpu()``, source: msprobe ``pytorch/common/utils.py`` save_pt).

    Raises:
        TilakeError: file missing; truncated/corrupt; the pickle needs globals beyond plain
            tensors (refused, with torch's reason — e.g. a ``torch_npu`` class); not a tensor.
    """
    import pickle

    import torch

    path = Path(path)
    check_regular(path, "tensor file")   # a FIFO or device: never opened (torch.load would block on it)
    if not path.is_file():
        raise TilakeError("tensor file referenced by dump.json is missing", path=path)
    try:
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zip" not in str(exc).lower():
                raise
            obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        for line in str(exc).splitlines():
            if "Unsupported global" in line or "GLOBAL" in line:
                reason = line.strip()
                break
        raise TilakeError("refused: the .pt needs more than plain tensors to load safely "
                          f"(weights_only=True): {reason}", path=path,
                          hint="re-dump with msprobe (it saves plain CPU tensors) or convert the file on a trusted host") from exc
    except Exception as exc:  # noqa: BLE001 - torch's unpickler raises anything on a non-torch file
        # (IndexError on a text file, EOFError/RuntimeError on truncated ones, ...): one line, no traceback
        msg = str(exc).splitlines()[0] if str(exc).strip() else ""
        raise TilakeError(f"cannot load tensor file (not a torch file, truncated or corrupt): "
                          f"{type(exc).__name__}{': ' + msg if msg else ''}", path=path) from exc
    if not isinstance(obj, torch.Tensor):
        raise TilakeError(f"tensor file holds a {type(obj).__name__}, not a tensor", path=path)
    READ_STATS["files"] += 1
    READ_STATS["bytes"] += obj.numel() * obj.element_size()
    return obj


# process-wide counters of tensor files loaded (used by bench/bench_dumps.py for GB/s figures)
READ_STATS = {"files": 0, "bytes": 0}
