"""The collection folders of ``tilake scan --dump``: the rollout hook installed beside the run, the msprobe configs
each side reads, and the dumps each collection run must leave (an empty or missing dump is an error, never a skip).

Layout of one collection run (round ``k``; :func:`tilake.ingest.scan.inject.plan_dump_injection` reads it through
``TILAKE_DUMP_DIR``)::

    <round dir>/hook/tilake_dump_hook.py                       the rollout hook (standalone: no tilake import)
    <round dir>/hook/tilake_dump_hook-1.0.dist-info/           METADATA + entry_points.txt (vllm.general_plugins)
    <round dir>/msprobe_train.json, msprobe_infer.json         msprobe config.json of each side (``load`` on a stub)
    <round dir>/train/step_<N>/actor_compute_log_prob/step0/rank<r>/   verl's precision tool (verl 0.9.1)
    <round dir>/infer/step0/rank<r>/ + tilake_rollout_dump.json        the hook (msprobe under the engine's model)
    <round dir>/run.log                                        the run's console log
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

from tilake.errors import TilakeError
from tilake.files import atomic_write_json
from tilake.ingest.scan import tilake_dump_hook as hook
from tilake.ingest.scan.inject import DUMP_STAGE

HOOK_DIST = "tilake_dump_hook-1.0.dist-info"
#: the entry point vLLM loads in each of its processes (``vllm/plugins/__init__.py`` ``DEFAULT_PLUGINS_GROUP``)
ENTRY_POINTS = "[vllm.general_plugins]\ntilake_dump_hook = tilake_dump_hook:register\n"


def install_hook(round_dir: Path) -> Path:
    """Copy the rollout hook and its ``vllm.general_plugins`` entry point into ``<round_dir>/hook`` (the folder
    the dump block puts on ``PYTHONPATH``; ``importlib.metadata`` finds a ``*.dist-info`` on ``sys.path``).

    Returns:
        the hook folder.
    Raises:
        TilakeError: the folder cannot be written.
    """
    d = Path(round_dir) / "hook"
    try:
        (d / HOOK_DIST).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(hook.__file__, d / "tilake_dump_hook.py")
        (d / HOOK_DIST / "METADATA").write_text("Metadata-Version: 2.1\nName: tilake-dump-hook\nVersion: 1.0\n",
                                                encoding="utf-8")
        (d / HOOK_DIST / "entry_points.txt").write_text(ENTRY_POINTS, encoding="utf-8")
    except OSError as exc:
        raise TilakeError(f"cannot install the rollout dump hook: {exc.strerror or exc}", path=d) from exc
    return d


def msprobe_config(dump_path: Path, level: str = "mix") -> Dict[str, Any]:
    """An msprobe ``config.json`` (mindstudio-probe 26.x keys, its shipped ``msprobe/config.json``): real tensors
    (task ``tensor``), modules and APIs (level ``mix``), every rank and step."""
    return {"task": "tensor", "dump_path": str(dump_path), "rank": [], "step": [], "level": level,
            "async_dump": False, "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}


def write_configs(round_dir: Path, stub_side: Optional[str] = None, stub_config: Optional[Path] = None) -> Dict[str, Path]:
    """Write ``msprobe_train.json`` and ``msprobe_infer.json`` for one collection run: the plain config on each
    side, except ``stub_side``, which gets ``stub_config`` (the ``tilake dumps stub-prepare`` config with
    ``load``; its ``dump_path`` is pointed at this round's side folder — verl and the hook set their own anyway).

    Raises:
        TilakeError: unreadable stub config, unwritable folder.
    """
    out = {}
    for side in ("train", "infer"):
        cfg = msprobe_config(Path(round_dir) / side)
        if side == stub_side and stub_config is not None:
            try:
                cfg = json.loads(Path(stub_config).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise TilakeError(f"cannot read the stub's msprobe config: {exc}", path=stub_config) from exc
            if not isinstance(cfg, dict) or not isinstance(cfg.get("load"), dict):
                raise TilakeError("the stub's msprobe config has no `load` section", path=stub_config)
            cfg["dump_path"] = str(Path(round_dir) / side)
        out[side] = atomic_write_json(Path(round_dir) / f"msprobe_{side}.json", cfg)
    return out


def _entries(rank_dir: Path) -> int:
    """Entries in ``dump.json``'s ``data`` (msprobe's dump of one rank); 0 when it has none."""
    try:
        meta = json.loads((rank_dir / "dump.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TilakeError(f"dump.json cannot be read ({exc})", path=rank_dir / "dump.json") from exc
    data = meta.get("data") if isinstance(meta, dict) else None
    return len(data) if isinstance(data, dict) else 0


def check_nonempty(root: Path, what: str) -> List[Path]:
    """The msprobe rank folders under ``root`` (``dump.json`` anywhere below it), each with at least one entry.

    Returns:
        the rank folders. ``what``: the side's words in the error (``the training side``).
    Raises:
        TilakeError: no ``dump.json`` under ``root``, or one without entries (naming that folder).
    """
    ranks = sorted(p.parent for p in Path(root).rglob("dump.json"))
    if not ranks:
        raise TilakeError(f"{what}'s dump has no step*/rank*/dump.json (msprobe wrote nothing)", path=root)
    empty = [r for r in ranks if _entries(r) == 0]
    if empty:
        raise TilakeError(f"{what}'s dump is empty (dump.json has no entry)", path=empty[0])
    return ranks


def find_train_dump(round_dir: Path, rl_step: int = 1, stage: str = DUMP_STAGE) -> Path:
    """The training side's dump of one collection run: verl's precision tool writes
    ``<round>/train/step_<rl_step>/<stage>/`` and msprobe ``step0/rank<r>/`` under it (verl 0.9.1
    ``precision_debugger_profile.py``).

    Returns:
        the ``<stage>`` folder (what ``tilake dumps analyze --train`` takes).
    Raises:
        TilakeError: the folder is missing, holds no ``dump.json``, or its ``dump.json`` has no entry (one line
        naming the folder; the run's log says why).
    """
    base = Path(round_dir) / "train"
    d = base / f"step_{rl_step}" / stage
    if not d.is_dir():
        found = sorted(str(p.relative_to(base)) for p in base.glob("step_*/*") if p.is_dir()) if base.is_dir() else []
        raise TilakeError(f"the training side dumped nothing for RL step {rl_step}, stage {stage} (verl's "
                          f"precision_debugger; found: {', '.join(found) or 'nothing'})", path=d,
                          hint="the run's log says why (msprobe missing in the RL venv, the stage not reached)")
    check_nonempty(d, "the training side")
    return d


class RolloutRequest(NamedTuple):
    """One request of the dumped prefill (vLLM V1 ``NewRequestData``)."""

    req_id: str
    prompt_tokens: int
    # prompt tokens already in the prefix cache (not recomputed by this prefill)
    computed_tokens: int


class HookRecord(NamedTuple):
    """What the rollout hook recorded of the prefill it dumped (``tilake_rollout_dump.json``)."""

    pid: int
    # 1-based: which real prefill of the process was dumped
    prefill: int
    requests: List[RolloutRequest]
    # sha256 of each request's prompt token ids (JSON list), in request order
    prompt_ids_sha256: List[str]
    scheduled_tokens: int


def read_hook_record(round_dir: Path) -> HookRecord:
    """The rollout hook's record (``<round>/infer/tilake_rollout_dump.json``).

    Raises:
        TilakeError: no record (the hook never saw a prefill: not loaded in the engine's process, or no request
        reached the engine), unreadable, or status ``error`` (its reason).
    """
    p = Path(round_dir) / "infer" / hook.RECORD
    if not p.is_file():
        raise TilakeError("the rollout hook left no record: it never dumped a prefill (not loaded by vLLM — is "
                          "hook/ on PYTHONPATH in the engine's processes? — or no request reached the engine)", path=p)
    try:
        rec = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TilakeError(f"the rollout hook's record cannot be read ({exc})", path=p) from exc
    if not isinstance(rec, dict) or rec.get("status") != "dumped":
        why = rec.get("reason") if isinstance(rec, dict) else "not a JSON object"
        raise TilakeError(f"the rollout hook did not dump the prefill: {why}", path=p)
    try:
        reqs = [RolloutRequest(str(r["req_id"]), int(r["prompt_tokens"]), int(r["computed_tokens"]))
                for r in rec.get("requests") or []]
        return HookRecord(int(rec["pid"]), int(rec["prefill"]), reqs, [str(x) for x in rec.get("prompt_ids_sha256") or []],
                          int(rec.get("scheduled_tokens") or 0))
    except (KeyError, TypeError, ValueError) as exc:
        raise TilakeError(f"the rollout hook's record lacks {exc}", path=p) from exc


def find_infer_dump(round_dir: Path) -> Path:
    """The rollout side's dump of one collection run (``<round>/infer``, the hook's msprobe dump path).

    Raises:
        TilakeError: as :func:`read_hook_record`, or no ``dump.json`` / an empty one under it.
    """
    read_hook_record(round_dir)
    d = Path(round_dir) / "infer"
    check_nonempty(d, "the rollout side")
    return d


def dump_size(path: Path) -> int:
    """Bytes under ``path`` (the dump's files)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
