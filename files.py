"""Output files: prove an output folder is writable before work starts.

The lowest floor with :mod:`tilake.errors`: every layer may import it, it imports nothing of tilake
but the error type.
"""
from __future__ import annotations

import os
from pathlib import Path

from tilake.errors import TilakeError


def check_out_dir(out_dir: Path) -> Path:
    """Create ``out_dir`` and prove it is writable before any work starts.

    Raises:
        TilakeError: it cannot be created or written.
    """
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".tilake-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TilakeError(f"output folder is not writable ({exc.strerror or exc})", path=out_dir) from exc
    return out_dir
