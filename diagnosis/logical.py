"""The logical side of canonicalisation (:mod:`tilake.diagnosis.canonical`): :class:`LogicalSide`, a dump side
whose ``load`` returns merged / joined / selected tensors, and the :class:`Record` of each step."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from tilake.ingest.msprobe.reader import MODULE_RE, DumpSide, Slot


@dataclass
class Record:
    """One canonicalisation step of one side (``kind``: tp | pp | tokens | chunks | replicas)."""

    side: str
    kind: str
    text: str
    detail: Dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, Any]:
        return {"side": self.side, "kind": self.kind, "text": self.text, **self.detail}


class NotMergeable(Exception):
    """A slot whose shards cannot be brought to one logical tensor (reason says which transform is missing)."""


# ------------------------------------------------------------------------------ the logical side
class LogicalSide:
    """A dump side seen as logical tensors; duck-types :class:`DumpSide` for every consumer.

    Args:
        proto: the side whose metadata (folder, meta, variants, warnings) describes the whole.
        entries / parents / order / slots: the logical names (after renaming for stages).
        loader: ``Slot → tensor`` for the logical slots (merging / joining / selecting on load).
        records: what was done (:class:`Record`), the proto's own records first.
    Raises:
        nothing; ``load`` raises :class:`TilakeError` (unreadable shard) or
        :class:`tilake.diagnosis.selectors.Unavailable` (shards that cannot be merged).
    """

    def __init__(self, proto, entries: Dict[str, dict], parents: Dict[str, Optional[str]], order: Dict[str, int],
                 slots: List[Slot], loader: Callable[[Slot], Any], records: List[Record],
                 pt_of: Optional[Callable[[Slot], Path]] = None, sources: Optional[List[Any]] = None) -> None:
        self.dir = proto.dir
        self._sources = list(sources) if sources else [proto]   # the dump folders behind the logical side
        self.side = proto.side
        self.step, self.rank, self.proc = proto.step, proto.rank, proto.proc
        self.meta = proto.meta
        self.warnings = list(proto.warnings)
        self.construct_variant = proto.construct_variant
        self.stack_variant = proto.stack_variant
        self.data_dir = proto.data_dir
        self.entries, self.parents, self.order = entries, parents, order
        self.slots = slots
        self._by_key = {(s.entry, s.io, s.index): s for s in slots}
        self._by_data_name = {s.data_name: s for s in slots if s.data_name}
        self._loader = loader
        self._pt_of = pt_of or (lambda s: proto.pt_path(s))
        self.records: List[Record] = list(getattr(proto, "records", [])) + list(records)
        self._proto = proto

    slot = DumpSide.slot
    api_name = DumpSide.api_name
    children = DumpSide.children

    def dtype_note(self) -> Optional[str]:
        """The dtype notes (:meth:`tilake.ingest.msprobe.reader.DumpSide.dtype_note`) of every dump folder behind
        this logical side (TP shards, PP stages, chunked-prefill steps), joined; None when none has one."""
        notes = [n for n in (getattr(s, "dtype_note", lambda: None)() for s in self._sources) if n]
        return " ".join(notes) or None

    def load(self, slot: Slot):
        """The logical tensor of ``slot`` (see the class)."""
        return self._loader(slot)

    def pt_path(self, slot: Slot) -> Path:
        """The ``.pt`` of the first shard/stage holding the slot (for statistics checks and stub sources)."""
        return self._pt_of(slot)

    def stack_frames(self) -> Dict[str, List[str]]:
        return self._proto.stack_frames()


def records_of(dump) -> List[Record]:
    """The canonicalisation records of a side (empty for a plain :class:`DumpSide`)."""
    return list(getattr(dump, "records", []))


def _cls(entry: str) -> Tuple[str, str]:
    """(module path, class) of a module entry name; ("", "") for an API entry."""
    m = MODULE_RE.match(entry)
    return (m.group("path"), m.group("cls")) if m else ("", "")
