"""Test-only stand-ins for `tilake scan` (there is no NPU, torch_npu or CANN on this machine).

* :func:`shim_env` — an environment whose PATH starts with ``bin/`` so the launch script's
  ``python3 -m verl...`` runs ``verl_standin.sh`` while every other ``python3`` call reaches the
  real interpreter.
* :class:`StandInSeam` — an :class:`tilake.ingest.scan.seam.NpuSeam` that reports a *stand-in*
  environment (``real=False``, name ``stand-in (tests)``) and whose ``analyse()`` runs
  ``standin_analyser.py`` in a chosen mode instead of torch_npu's. Everything the scan records
  carries that name, so no output can be mistaken for a real NPU parse.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from tilake.ingest.scan.seam import AnalyseResult, NpuProbe, NpuSeam

HERE = Path(__file__).resolve().parent
BIN = HERE / "bin"
ANALYSER = HERE / "standin_analyser.py"


def shim_env(home: Path, **extra: str) -> Dict[str, str]:
    """Environment for running a launch script against the stand-in verl."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STANDIN_")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', os.defpath)}", "HOME": str(home),
                "TILAKE_REAL_PYTHON": sys.executable})
    env.pop("PROFILER_OUTPUT_DIR", None)
    env.update(extra)
    return env


def read_args(path: Path) -> List[str]:
    """argv recorded by the stand-in (module first)."""
    data = path.read_bytes()
    return [a.decode() for a in data.split(b"\0")[:-1]]


class StandInSeam(NpuSeam):
    """Stand-in seam. ``modes`` maps an analyse call to the analyser's behaviour.

    Args:
        modes: ``{"plain": mode, "db": mode}`` — mode for ``analyse(path)`` and for
            ``analyse(path, export_type=['db'])``. Modes: ``db`` (writes the parsed DB),
            ``fail`` (exits 1, writes nothing), ``nothing`` (returns normally, writes nothing),
            ``empty_cti`` (DB with an empty COMPUTE_TASK_INFO plus host-side CSVs),
            ``empty_cti_nocsv`` (empty COMPUTE_TASK_INFO, no CSVs), ``text`` (CSVs only, no DB).
        export_type_supported: what the probe says about ``analyse(export_type=...)``.
        npu_count: NPUs the probe reports.
    """

    name = "stand-in (tests)"
    real = False

    def __init__(self, modes: Optional[Dict[str, str]] = None, export_type_supported: bool = True,
                 npu_count: int = 1) -> None:
        self.modes = {"plain": "db", "db": "db", **(modes or {})}
        self.export_type_supported = export_type_supported
        self.npu_count = npu_count
        self.calls: List[Dict[str, object]] = []
        self.probe_envs: List[Dict[str, str]] = []

    def probe(self, env: Mapping[str, str], python: Optional[str] = None) -> NpuProbe:
        self.probe_envs.append(dict(env))
        return NpuProbe(seam=self.name, real=False, python=str(BIN / "python3"), torch="stand-in",
                        torch_npu="stand-in", npu_count=self.npu_count, msprof="stand-in",
                        msprof_default_db=True, analyse_export_type=self.export_type_supported,
                        packages={"megatron-core": "stand-in", "vllm": "stand-in", "vllm-ascend": "stand-in",
                                  "mbridge": "stand-in"})

    def analyse(self, raw_dir: Path, export_type: Optional[Sequence[str]], log_path: Path,
                env: Optional[Mapping[str, str]] = None, timeout_s: float = 3600) -> AnalyseResult:
        et = None if export_type is None else list(export_type)
        self.calls.append({"path": str(raw_dir), "export_type": et})
        if et is not None and not self.export_type_supported:
            return AnalyseResult(str(raw_dir), et, False, None, None,
                                 "analyse() has no export_type parameter in this torch_npu (needs >= 7.1.0)",
                                 True, self.name, False)
        mode = self.modes["plain" if et is None else "db"]
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "w") as log:
            cp = subprocess.run([sys.executable, str(ANALYSER), str(raw_dir), mode], stdout=log,
                                stderr=subprocess.STDOUT)
        ok = cp.returncode == 0
        return AnalyseResult(str(raw_dir), et, ok, cp.returncode, str(log_path),
                             None if ok else f"stand-in analyser exited with status {cp.returncode}",
                             False, self.name, False)
