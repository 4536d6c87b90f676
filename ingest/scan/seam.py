"""The one narrow seam between tilake and the Ascend software stack.

Everything ``tilake scan`` needs from torch / torch_npu / CANN goes through an :class:`NpuSeam`:

* :meth:`NpuSeam.probe` — which interpreter the launch script will use, whether ``torch`` and
  ``torch_npu`` import there, how many NPUs ``torch.npu.device_count()`` sees, ``msprof`` on
  ``PATH`` (and whether its ``--help`` lists ``text(which will also export the database)``),
  versions of megatron-core / vllm / vllm-ascend / mbridge (seed stage 1.2).
* :meth:`NpuSeam.analyse` — ``torch_npu.profiler.profiler.analyse(path[, export_type=[...]])`` on one
  raw ``*_ascend_pt`` folder, run in a child process of that interpreter with its output saved
  to a log file (reference doc §3.2: ``export_type`` exists from torch_npu 7.1.0 only; ``analyse``
  needs the CANN toolkit and refuses to parse inside a daemon process).

:class:`TorchNpuSeam` is the real implementation. It never pretends: when torch_npu is not
importable the probe says so and ``analyse`` returns a failed :class:`AnalyseResult` naming the
reason. Tests substitute their own seam (``tests/data/verl_launch/standin``) whose ``name`` and
``real=False`` travel into every record the scan writes.
"""
from __future__ import annotations

import abc
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

#: distributions whose versions stage 1 reports (seed: ``pip show megatron-core vllm vllm-ascend mbridge``)
PACKAGES = ("torch", "torch_npu", "megatron-core", "vllm", "vllm-ascend", "mbridge", "verl")

#: msprof's help text when a text parse also exports the DB (reference doc §0.6)
MSPROF_DEFAULT_DB_MARK = "text(which will also export the database)"

_PROBE_PROGRAM = r"""
import json, sys
out = {"python": sys.executable, "python_version": sys.version.split()[0], "packages": {}}
try:
    from importlib import metadata
    for name in sys.argv[1:]:
        try:
            out["packages"][name] = metadata.version(name)
        except Exception:
            out["packages"][name] = None
except Exception as exc:
    out["packages_error"] = repr(exc)
try:
    import torch
    out["torch"] = torch.__version__
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
if "torch" in out:
    try:
        import torch_npu
        out["torch_npu"] = getattr(torch_npu, "__version__", "unknown")
        try:
            out["npu_count"] = int(torch.npu.device_count())
        except Exception as exc:
            out["npu_error"] = f"{type(exc).__name__}: {exc}"
        try:
            import inspect
            from torch_npu.profiler.profiler import analyse
            out["analyse_export_type"] = "export_type" in inspect.signature(analyse).parameters
        except Exception as exc:
            out["analyse_error"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        out["torch_npu_error"] = f"{type(exc).__name__}: {exc}"
print("TILAKE_PROBE " + json.dumps(out))
"""

_ANALYSE_PROGRAM = r"""
import json, sys
path, export_type = sys.argv[1], json.loads(sys.argv[2])
from torch_npu.profiler.profiler import analyse
if export_type is None:
    analyse(path)
else:
    import inspect
    if "export_type" not in inspect.signature(analyse).parameters:
        print("TILAKE_NO_EXPORT_TYPE: this torch_npu's analyse() has no export_type parameter (needs >= 7.1.0)")
        sys.exit(3)
    analyse(path, export_type=export_type)
print("TILAKE_ANALYSE_RETURNED")
"""


@dataclass
class NpuProbe:
    """What the seam found about the Ascend stack (stage 1 environment check input).

    Attributes:
        seam: seam name (``torch_npu`` for the real one). real: False for stand-ins.
        python: interpreter the launch script resolves to. torch / torch_npu: versions or None.
        torch_error / torch_npu_error / npu_error: why an import or the device count failed.
        npu_count: ``torch.npu.device_count()`` or None. msprof: path on PATH or None.
        msprof_default_db: msprof's help lists the "text also exports the database" mode
            (None = unknown). analyse_export_type: ``analyse`` accepts ``export_type`` (None = unknown).
        packages: distribution → version or None (not installed).
    """

    seam: str
    real: bool
    python: Optional[str] = None
    torch: Optional[str] = None
    torch_error: Optional[str] = None
    torch_npu: Optional[str] = None
    torch_npu_error: Optional[str] = None
    npu_count: Optional[int] = None
    npu_error: Optional[str] = None
    msprof: Optional[str] = None
    msprof_default_db: Optional[bool] = None
    analyse_export_type: Optional[bool] = None
    packages: Dict[str, Optional[str]] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


@dataclass
class AnalyseResult:
    """One ``analyse()`` call.

    Attributes:
        path: the raw folder. export_type: None or the list passed. ok: the call returned normally.
        returncode: child exit status (None when it could not start). log_path: saved output.
        error: one-line reason when not ok. unsupported: ``export_type`` is not supported by this
            torch_npu (so fallback 1 is impossible). seam / real: who did it.
    """

    path: str
    export_type: Optional[List[str]]
    ok: bool
    returncode: Optional[int]
    log_path: Optional[str]
    error: Optional[str]
    unsupported: bool
    seam: str
    real: bool


class NpuSeam(abc.ABC):
    """Interface of the seam (see module doc). Subclasses set ``name`` and ``real``."""

    name = "abstract"
    real = False

    @abc.abstractmethod
    def probe(self, env: Mapping[str, str], python: Optional[str] = None) -> NpuProbe:
        """Detect torch/torch_npu, NPU count and tools in the run environment."""

    @abc.abstractmethod
    def analyse(self, raw_dir: Path, export_type: Optional[Sequence[str]], log_path: Path,
                env: Optional[Mapping[str, str]] = None, timeout_s: float = 3600) -> AnalyseResult:
        """Parse one raw ``*_ascend_pt`` folder (``torch_npu.profiler.profiler.analyse``)."""


def resolve_python(program: str, env: Mapping[str, str]) -> Optional[str]:
    """Absolute path of ``program`` (e.g. ``python3``) on the run environment's PATH."""
    if os.sep in program:
        return program if os.access(program, os.X_OK) else None
    return shutil.which(program, path=env.get("PATH", os.defpath))


class TorchNpuSeam(NpuSeam):
    """The real seam: torch_npu's ``analyse()`` in a child process of the script's interpreter."""

    name = "torch_npu"
    real = True

    def __init__(self, python: Optional[str] = None) -> None:
        self.python = python
        self._probe: Optional[NpuProbe] = None
        self._probe_key: Optional[tuple] = None

    def probe(self, env: Mapping[str, str], python: Optional[str] = None) -> NpuProbe:
        """Import torch/torch_npu in the launch script's interpreter and look for msprof.

        Args:
            env: the environment the script will run with (PATH decides ``python3`` and ``msprof``).
            python: interpreter to probe (default: ``python3`` on that PATH, else this one).
        """
        exe = python or self.python or resolve_python("python3", env) or sys.executable
        key = (exe, env.get("PATH", ""), env.get("ASCEND_RT_VISIBLE_DEVICES"))
        if self._probe is not None and self._probe_key == key:
            return self._probe            # one probe per interpreter and PATH (it imports torch)
        self.python = exe
        self._probe_key = key
        pr = NpuProbe(seam=self.name, real=True, python=exe)
        try:
            # from "/": ``python -c`` puts the working folder first on sys.path, and a torch.py beside the
            # user's script must not be what the fixed probe imports (and runs)
            cp = subprocess.run([exe, "-c", _PROBE_PROGRAM, *PACKAGES], env=dict(env), capture_output=True,
                                text=True, timeout=300, cwd="/", stdin=subprocess.DEVNULL)
            line = next((ln for ln in cp.stdout.splitlines() if ln.startswith("TILAKE_PROBE ")), None)
            if line is None:
                pr.torch_error = f"probe of {exe} failed: " + (cp.stderr.strip().splitlines() or ["no output"])[-1]
            else:
                d = json.loads(line[len("TILAKE_PROBE "):])
                pr.torch, pr.torch_error = d.get("torch"), d.get("torch_error")
                pr.torch_npu, pr.torch_npu_error = d.get("torch_npu"), d.get("torch_npu_error")
                pr.npu_count, pr.npu_error = d.get("npu_count"), d.get("npu_error")
                pr.analyse_export_type = d.get("analyse_export_type")
                pr.packages = d.get("packages", {})
                if pr.torch is None and pr.torch_error is None:
                    pr.torch_error = "torch did not import"
                if pr.torch is not None and pr.torch_npu is None and pr.torch_npu_error is None:
                    pr.torch_npu_error = "torch_npu did not import"
        except (OSError, subprocess.SubprocessError) as exc:
            pr.torch_error = f"cannot run {exe}: {exc}"
        pr.msprof = shutil.which("msprof", path=env.get("PATH", os.defpath))
        if pr.msprof:
            try:
                cp = subprocess.run([pr.msprof, "--help"], env=dict(env), capture_output=True, text=True, timeout=60,
                                    cwd="/", stdin=subprocess.DEVNULL)
                pr.msprof_default_db = MSPROF_DEFAULT_DB_MARK in (cp.stdout + cp.stderr)
            except (OSError, subprocess.SubprocessError):
                pr.msprof_default_db = None
        self._probe = pr
        return pr

    def analyse(self, raw_dir: Path, export_type: Optional[Sequence[str]], log_path: Path,
                env: Optional[Mapping[str, str]] = None, timeout_s: float = 3600) -> AnalyseResult:
        """Run ``torch_npu.profiler.profiler.analyse(raw_dir[, export_type=...])``.

        The child's stdout+stderr go to ``log_path``. Never raises for a failed parse: the
        result says what happened (a missing torch_npu is reported as such).
        """
        env = dict(os.environ if env is None else env)
        exe = self.python or resolve_python("python3", env) or sys.executable
        et = None if export_type is None else list(export_type)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(log_path, "w", encoding="utf-8", errors="replace") as log:
                cp = subprocess.run([exe, "-c", _ANALYSE_PROGRAM, str(raw_dir), json.dumps(et)], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return AnalyseResult(str(raw_dir), et, False, None, str(log_path),
                                 f"analyse() did not finish within {timeout_s:.0f} s", False, self.name, True)
        except OSError as exc:
            return AnalyseResult(str(raw_dir), et, False, None, None, f"cannot run {exe}: {exc}", False,
                                 self.name, True)
        text = log_path.read_text(encoding="utf-8", errors="replace")
        unsupported = "TILAKE_NO_EXPORT_TYPE" in text
        ok = cp.returncode == 0 and "TILAKE_ANALYSE_RETURNED" in text
        error = None
        if not ok:
            last = [ln for ln in text.splitlines() if ln.strip()]
            error = ("analyse() has no export_type parameter in this torch_npu (needs >= 7.1.0)" if unsupported
                     else f"analyse() exited with status {cp.returncode}: " + (last[-1][:300] if last else "no output"))
            if "No module named 'torch_npu'" in text:
                error = "torch_npu not importable: analyse() cannot run on this machine"
        return AnalyseResult(str(raw_dir), et, ok, cp.returncode, str(log_path), error, unsupported, self.name, True)


class RecordedOutputSeam(NpuSeam):
    """Used by ``tilake scan --from-output``: nothing is parsed, so ``analyse`` is never called."""

    name = "none (recorded output, nothing parsed)"
    real = True

    def probe(self, env: Mapping[str, str], python: Optional[str] = None) -> NpuProbe:
        return NpuProbe(seam=self.name, real=True)

    def analyse(self, raw_dir: Path, export_type: Optional[Sequence[str]], log_path: Path,
                env: Optional[Mapping[str, str]] = None, timeout_s: float = 3600) -> AnalyseResult:
        return AnalyseResult(str(raw_dir), None if export_type is None else list(export_type), False, None, None,
                             "recorded output is not modified", False, self.name, True)


def get_seam() -> NpuSeam:
    """The seam the CLI uses (tests monkeypatch this to install a stand-in)."""
    return TorchNpuSeam()
