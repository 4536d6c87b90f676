"""Facts about a run that sit beside its captures: the phases to compare, the switches that produced
the kernels (launch script, environment, ``profiler_info_*.json``) and the mismatch the RL framework
measured (verl's log). They land in the ``runs`` row (``phases``, ``settings``, ``tool_versions``,
``log_path``) and in ``run_metrics``; docs/phases.md describes them.

Format facts:

* verl console metrics (``trainer.logger`` ``console``, verl ``utils/tracking.py`` ``_ConsoleLogger``):
  one line per step, ``step:<N> - <key>:<value> - <key>:<value> …``, possibly prefixed by Ray's
  ``(TaskRunner pid=…)`` and ANSI colour codes; a key without a value (``rollout_corr/chi2_token:``) is
  not a number. Real example: ``../shared/verl-cpu/logs/run_grpo_profiled.log.gz`` line 1178 (verl 0.9.1).
* verl JSONL (``trainer.logger`` ``file``, ``utils/tracking.py`` ``FileLogger``): one JSON object per
  line, ``{"step": N, "data": {key: value}}``; a flat ``{"step": N, key: value}`` is read too.
* ``profiler_info_<rank>.json`` of torch_npu ≥ 2.7: top-level ``torch_npu_version`` and
  ``cann_version`` (real: ``../shared/fixtures/real_public/msinsight_st_level2/rank_0_ascend_pt/
  profiler_info_0.json``: ``"2.7.1"``, ``"8.3.RC1"``); older files have neither.
"""
from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, TypedDict, Union

from tilake.errors import TilakeError
from tilake.ingest.inputs import open_decompressed, skip_special
from tilake.vocab import INFER_PHASES, TRAIN_PHASES, Phase

# a setting's value as recorded: text, an integer, true/false or a number from the config
SettingValue = Union[str, int, float, bool, None]


class Setting(TypedDict):
    """One switch of a run (``runs.settings`` JSON holds ``{name: Setting}``)."""

    # the value as the source states it (integers and true/false typed)
    value: SettingValue
    # where it was read: ``launch script: <key>``, ``launch env``, ``environment``, ``--setting`` …
    source: str


# the values of one ``runs`` row a caller hands the profiler ingest (tilake.ingest.profiler.load.ingest_profile;
# columns: tilake.lake.schema ``runs``). All optional: ingest fills host, rules, created_at, kind and the
# unknowns; ``_metrics`` (the log's mismatch metric rows) goes to ``run_metrics``, and ``stage3`` (a scan's
# collection outcome) rides along inside ``rl_config``.
RunMeta = TypedDict("RunMeta", {
    "run_id": str, "model_id": str, "model_family": str, "step": int, "script_path": str,
    "collection_method": str, "train_backend": str, "infer_backend": str,
    "parallel_config": Dict[str, Any], "rl_config": Optional[Dict[str, Any]],
    "tool_versions": Dict[str, Union[str, bool]], "tags": Dict[str, str], "host": str, "source_path": str,
    "kind": str, "created_at": Any, "rules": Optional[Dict[str, Any]], "phases": Optional[str],
    "settings": Dict[str, "Setting"], "log_path": str, "stage3": Dict[str, Any], "_metrics": List["MetricRow"],
}, total=False)


class MetricRow(TypedDict):
    """One ``run_metrics`` row (without ``run_id``): a mismatch metric an RL log holds at a step."""

    # the logged step (None: a JSONL record without one)
    step: Optional[int]
    # the metric key as logged (``rollout_corr/…``)
    metric: str
    value: float
    # the log file read
    source_path: str
    # 1-based line of the log
    line_no: int
    # console | jsonl
    format: str

#: phases a kernel can be given (seeds/phase_rules.csv), per side
PHASES: Dict[str, tuple] = {"train": TRAIN_PHASES, "infer": INFER_PHASES}
#: the comparison when --phases is not given: the pair whose numbers become the log-prob mismatch
DEFAULT_PHASES = "train:actor_log_prob,infer:prefill"

#: logged keys kept from the RL log: verl's train–rollout mismatch metrics
METRIC_PREFIXES = ("training/rollout_", "rollout_corr/")

#: switches read from the launch script and its environment, with where they matter
ENV_SETTINGS = ("HCCL_DETERMINISTIC", "VLLM_BATCH_INVARIANT", "CLOSE_MATMUL_K_SHIFT", "ASCEND_LAUNCH_BLOCKING",
                "VLLM_ENABLE_V1_MULTIPROCESSING", "TORCH_NPU_DETERMINISTIC", "LCCL_DETERMINISTIC",
                "ATB_MATMUL_SHUFFLE_K_ENABLE", "VLLM_ASCEND_ENABLE_NZ")
#: config rows of the launch script (tilake.ingest.scan.verl_config.FIELDS / extract_config) kept as settings
CONFIG_SETTINGS = {"rollout_enforce_eager": "enforce_eager", "train_tp": "train_tp", "train_pp": "train_pp",
                   "train_ep": "train_ep", "train_cp": "train_cp", "infer_tp": "infer_tp", "infer_dp": "infer_dp",
                   "infer_ep": "infer_ep", "train_backend": "train_backend", "infer_backend": "infer_backend"}

#: the command-line options of these facts (``tilake run`` / ``tilake ingest``), as ``click.option``
#: arguments: the CLI builds them; ``--log``/``--script`` come as text, ``--setting`` as ``KEY=VALUE`` text
#: (:func:`parse_setting_items`); tilake.pipeline.profile.facts_meta turns them into ``runs`` values
FACT_OPTIONS = [
    (("--phases",), {"metavar": "SPEC", "help": "Phases compared: default train:actor_log_prob,infer:prefill (the "
                     "log-prob forward vs the rollout prefill); 'all'; or side:phase items, e.g. "
                     "train:update_actor,infer:decode (docs/phases.md)."}),
    (("--log",), {"metavar": "FILE", "help": "The run's verl log (console or JSONL, .gz ok): its train-rollout "
                  "mismatch metrics (training/rollout_probs_diff_*, rollout_corr/*) are recorded with the run."}),
    (("--script",), {"metavar": "FILE", "help": "The launch script: its switches (enforce_eager, TP/PP/EP, "
                     "HCCL_DETERMINISTIC, ...) are recorded with the run."}),
    (("--setting", "settings"), {"multiple": True, "metavar": "KEY=VALUE",
                                 "help": "A switch recorded with the run (repeatable), e.g. HCCL_DETERMINISTIC=true."}),
]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PAIR = re.compile(r"^([A-Za-z_][\w/@.\-]*):(.*)$")


def parse_phases(spec: Optional[str]) -> Optional[str]:
    """Validate a ``--phases`` value; returns the text stored in ``runs.phases``.

    Args:
        spec: None/``default`` (actor log-prob forward vs rollout prefill), ``all`` (every kernel, the
            behaviour before phases), or ``side:phase`` items joined by commas
            (``train:update_actor,infer:decode``; phases in :data:`PHASES`).
    Returns:
        None for the default, else the normalised spec (``all`` or the items, spaces removed).
    Raises:
        TilakeError: an unknown side or phase (the message lists the accepted ones).
    """
    if spec is None or spec.strip() in ("", "default"):
        return None
    s = spec.strip()
    if s == Phase.ALL:
        return Phase.ALL
    items = []
    for item in (x.strip() for x in s.split(",") if x.strip()):
        side, _, phase = item.partition(":")
        if side not in PHASES or phase not in PHASES[side]:
            known = ", ".join(f"{sd}:{p}" for sd, ps in PHASES.items() for p in ps)
            raise TilakeError(f"unknown phase {item!r} for --phases: use default, all, or side:phase items "
                              f"joined by commas ({known})")
        items.append(f"{side}:{phase}")
    return ",".join(items)


def _open_bytes(path: Path):
    """Binary stream (gunzipped when gzip, at most :data:`tilake.ingest.inputs.GZIP_MAX_RATIO` × the file's size;
    a FIFO or device is refused, never waited on): lines split on ``\\n`` only, so line numbers are grep's
    (progress bars in RL logs redraw with bare ``\\r``)."""
    return open_decompressed(path, "RL log")


#: longest log line read (bytes); the rest of a longer line is skipped (no metrics line is that long)
MAX_LOG_LINE = 1 << 20


def _lines(f):
    """``(line_no, bytes)`` of each line, at most :data:`MAX_LOG_LINE` bytes held (a 10 GB line is skipped
    in pieces, never read whole)."""
    no = 0
    while True:
        raw = f.readline(MAX_LOG_LINE)
        if not raw:
            return
        no += 1
        if len(raw) >= MAX_LOG_LINE and not raw.endswith(b"\n"):
            while True:
                more = f.readline(MAX_LOG_LINE)
                if not more or more.endswith(b"\n"):
                    break
            continue
        yield no, raw


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _keep(key: str) -> bool:
    return key.startswith(METRIC_PREFIXES)


def read_rl_metrics(path: Path) -> List[MetricRow]:
    """The mismatch metrics an RL log holds (console lines and JSONL, plain or gzip).

    Args:
        path: verl's console log (``tilake scan`` keeps it as ``run.log``) or its JSONL file.
    Returns:
        ``run_metrics`` rows without ``run_id``: ``{step, metric, value, source_path, line_no, format}``,
        one per numeric key of :data:`METRIC_PREFIXES` per logged step (``value`` float; a key logged with
        no number, e.g. ``rollout_corr/chi2_token:``, is left out — absent, never 0).
    Raises:
        TilakeError: the file cannot be read (names it).
    """
    path = Path(path)
    rows: List[MetricRow] = []
    try:
        with _open_bytes(path) as f:
            for no, raw in _lines(f):
                line = _ANSI.sub("", raw.decode("utf-8", errors="replace")).strip()
                if not line:
                    continue
                if line.startswith("{"):
                    rows += _jsonl_rows(line, path, no)
                    continue
                m = re.search(r"(?:^|\s)step:(\d+) - ", line)
                if not m:
                    continue
                step = int(m.group(1))
                for chunk in line[m.end():].split(" - "):
                    pm = _PAIR.match(chunk.strip())
                    if not pm or not _keep(pm.group(1)):
                        continue
                    v = _number(pm.group(2).strip())
                    if v is not None:
                        rows.append({"step": step, "metric": pm.group(1), "value": v, "source_path": str(path),
                                     "line_no": no, "format": "console"})
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TilakeError(f"cannot read the RL log ({exc})", path=path) from exc
    return rows


def _jsonl_rows(line: str, path: Path, no: int) -> List[MetricRow]:
    try:
        obj = json.loads(line)
    except ValueError:
        return []
    if not isinstance(obj, dict):
        return []
    data = obj.get("data") if isinstance(obj.get("data"), dict) else obj
    step = obj.get("step", data.get("step"))
    step = int(step) if isinstance(step, (int, float)) and not isinstance(step, bool) else None
    out = []
    for k, v in data.items():
        x = _number(v)
        if isinstance(k, str) and _keep(k) and x is not None:
            out.append({"step": step, "metric": k, "value": x, "source_path": str(path), "line_no": no,
                        "format": "jsonl"})
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def settings_from_script(parsed) -> Dict[str, Setting]:
    """Switches of a parsed launch script (:class:`tilake.ingest.scan.script.ParsedScript`).

    Returns:
        ``{name: {"value": …, "source": …}}``: :data:`CONFIG_SETTINGS` from its config (graph mode is
        ``enforce_eager``; ``unknown`` values left out) and :data:`ENV_SETTINGS` the script exports or
        prefixes to the launch (``source`` names where: ``override <key>``, ``script variable``,
        ``launch env``).
    """
    out: Dict[str, Setting] = {}
    cfg, src = parsed.config, parsed.sources
    for key, name in CONFIG_SETTINGS.items():
        v = cfg.get(key)
        if v is not None and str(v) != "unknown" and not str(v).startswith("n/a"):
            out[name] = {"value": _plain(v), "source": f"launch script: {src.get(key, 'config')}"}
    if "enforce_eager" in out:
        out["graph_mode"] = {"value": not bool(out["enforce_eager"]["value"]),
                             "source": "not enforce_eager (" + out["enforce_eager"]["source"] + ")"}
    env = getattr(parsed.launch, "env", {}) or {}
    for name in ENV_SETTINGS:
        if name in env:
            out[name] = {"value": _plain(getattr(env[name], "value", env[name])), "source": "launch env"}
        elif name in parsed.variables:
            out[name] = {"value": _plain(parsed.variables[name]), "source": "launch script variable"}
    return out


def settings_from_env(env: Mapping[str, str]) -> Dict[str, Setting]:
    """:data:`ENV_SETTINGS` present in ``env`` (the environment a scan runs the script with)."""
    return {k: {"value": env[k], "source": "environment"} for k in ENV_SETTINGS if k in env}


def parse_setting_items(items: Iterable[Any]) -> Dict[str, Setting]:
    """``--setting KEY=VALUE`` texts (or ``(key, value)`` pairs) → settings (integers and true/false typed).

    Raises:
        TilakeError: a text without ``=`` or with an empty key.
    """
    out: Dict[str, Setting] = {}
    for item in items:
        if isinstance(item, str):
            if "=" not in item or not item.split("=", 1)[0].strip():
                raise TilakeError(f"--setting expects KEY=VALUE, got {item!r}")
            item = item.split("=", 1)
        k, v = str(item[0]).strip(), str(item[1]).strip()
        val: SettingValue = v
        if re.fullmatch(r"-?\d+", v):
            val = int(v)
        elif v.lower() in ("true", "false"):
            val = v.lower() == "true"
        out[k] = {"value": val, "source": "--setting"}
    return out


def versions_from_profiler_info(pt_dirs: Iterable[Optional[Path]]) -> Dict[str, str]:
    """``torch_npu`` / ``cann`` versions from the ``profiler_info*.json`` of the capture folders.

    Returns:
        ``{"torch_npu": …, "cann": …}`` with the keys found (first value seen per key; files that
        cannot be read or hold no version are skipped: an absent version stays absent).
    """
    found: Dict[str, str] = {}
    for d in pt_dirs:
        if d is None or not Path(d).is_dir():
            continue
        for p in sorted(Path(d).glob("profiler_info*.json")):
            if skip_special(p, "profiler_info sidecar"):
                continue
            try:
                info = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if not isinstance(info, dict):
                continue
            for key, name in (("torch_npu_version", "torch_npu"), ("cann_version", "cann")):
                v = info.get(key)
                if isinstance(v, str) and v.strip() and name not in found:
                    found[name] = v.strip()
    return found
