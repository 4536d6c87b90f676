"""Guards for reading input files someone else made: special files, links out of the input tree, gzip bombs.

Every reader of a capture, sidecar, trace, dump or log goes through these before it opens a path:

* :func:`special_kind` / :func:`check_regular`: a FIFO, device node or socket where a file should be is named and
  skipped, never opened (``open()`` of a FIFO blocks until a writer comes, and ignores SIGINT while it waits).
  The check is ``os.stat`` (a symlink to a FIFO is a FIFO); :func:`open_regular` then opens with ``O_NONBLOCK``
  and checks the opened descriptor again (``fstat``), so a file swapped for a FIFO between the two is still not
  waited on.
* :func:`outside` / :func:`within`: whether a path, its links followed, leaves a tree (``os.path.realpath``).
* :class:`CappedReader` / :func:`open_decompressed`: a gzip stream that grows past :data:`GZIP_MAX_RATIO` times
  its compressed size (and past :data:`GZIP_FREE_BYTES`) stops with one line, so a 1 MB file cannot become GBs
  of text on disk or in memory.

It imports nothing of tilake but the error type (any layer may use it).
"""
from __future__ import annotations

import gzip
import io
import os
import stat
from pathlib import Path
from typing import Optional, Union

from tilake.errors import TilakeError

PathLike = Union[str, Path]

#: a gzip member may decompress to this many times its compressed size before the reader stops (real
#: profiler traces and RL logs compress 5-30×; 1 GiB of whitespace in a 1 MB file is 1000×)
GZIP_MAX_RATIO = 200
#: decompressed bytes always allowed whatever the ratio (small files of repetitive text)
GZIP_FREE_BYTES = 256 << 20

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


class SpecialFile(TilakeError):
    """A FIFO, device, socket or folder where a regular file was expected (the message names which)."""


class DecompressionBomb(TilakeError):
    """A gzip stream that grows past the allowed ratio (the message says how far it was read)."""


def special_kind(path: PathLike) -> Optional[str]:
    """``"a FIFO (named pipe)"`` / ``"a character device"`` / … for a path that exists and is not a regular file
    (links followed), None for a regular file or a path that does not exist or cannot be stat'ed."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, what in _KINDS:
        if test(mode):
            return what
    return None if stat.S_ISREG(mode) else "not a regular file"


def check_regular(path: PathLike, what: str = "file") -> None:
    """Raise :class:`SpecialFile` when ``path`` is a FIFO, device, socket or folder.

    Raises:
        SpecialFile: ``"<what> is a FIFO (named pipe), not a file: skipped, never opened"``.
    """
    kind = special_kind(path)
    if kind is not None:
        raise SpecialFile(f"{what} is {kind}, not a regular file: not opened (a FIFO would block the read)",
                          path=Path(path))


def skip_special(path: PathLike, what: str = "file") -> bool:
    """True (and one notice line on stderr) when ``path`` is a FIFO, device or socket: the caller skips it.
    For optional files (sidecars) whose absence is not an error."""
    kind = special_kind(path)
    if kind is None or kind == "a folder":
        return False
    from tilake.progress import notice

    notice(f"{path}: {what} is {kind}, not a regular file: skipped, never opened")
    return True


def open_regular(path: PathLike, what: str = "file"):
    """Open ``path`` for binary reading without ever blocking on a FIFO: ``O_NONBLOCK``, then ``fstat`` of the
    opened descriptor must say regular file (then the descriptor is switched back to blocking reads).

    Raises:
        SpecialFile: not a regular file. OSError: as ``open``.
    """
    check_regular(path, what)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SpecialFile(f"{what} is not a regular file: not read", path=Path(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def within(path: PathLike, root: PathLike) -> bool:
    """Whether ``path`` with every link followed lies inside ``root`` (links of ``root`` followed too)."""
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def outside(path: PathLike, root: PathLike) -> bool:
    """Whether ``path`` is a link (or has a link in its folders below ``root``) that leads out of ``root``."""
    return not within(path, root)


class CappedReader(io.RawIOBase):
    """A read-only stream over ``inner`` (a gzip file) that raises :class:`DecompressionBomb` once more than
    ``limit`` bytes came out of it.

    Args:
        inner: the decompressing stream. limit: decompressed bytes allowed. path: named in the error.
        compressed: the file's size on disk (for the message).
    """

    def __init__(self, inner, limit: int, path: Path, compressed: int) -> None:
        self.inner, self.limit, self.path, self.compressed, self.out = inner, limit, path, compressed, 0

    def readable(self) -> bool:
        return True

    def _count(self, n: int) -> None:
        self.out += n
        if self.out > self.limit:
            raise DecompressionBomb(
                f"the gzip stream decompresses to more than {self.limit >> 20} MiB from {self.compressed:,} bytes "
                f"on disk (over {GZIP_MAX_RATIO}× its size, e.g. padding or a gzip bomb): not read further",
                path=self.path, hint="gunzip it yourself if the content is real, then give the plain file")

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            size = self.limit - self.out + 1
        b = self.inner.read(size)
        self._count(len(b))
        return b

    def readinto(self, buf) -> int:
        b = self.read(len(buf))
        buf[:len(b)] = b
        return len(b)

    def readline(self, size: int = -1) -> bytes:
        b = self.inner.readline(size if size is not None and size >= 0 else self.limit - self.out + 1)
        self._count(len(b))
        return b

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            super().close()


def gzip_limit(path: PathLike) -> int:
    """Decompressed bytes allowed for the gzip file ``path``: ``max(GZIP_FREE_BYTES, GZIP_MAX_RATIO × size)``."""
    return max(GZIP_FREE_BYTES, GZIP_MAX_RATIO * os.stat(path).st_size)


def is_gzip_file(path: PathLike) -> bool:
    """The file starts with the gzip magic (opened without blocking; a special file raises :class:`SpecialFile`)."""
    with open_regular(path) as f:
        return f.read(2) == b"\x1f\x8b"


def open_decompressed(path: PathLike, what: str = "file"):
    """Binary stream of ``path``'s content: gunzipped (capped, :class:`CappedReader`) when it is gzip, else the file.

    Raises:
        SpecialFile: a FIFO/device/socket/folder. OSError: as ``open``.
    """
    f = open_regular(path, what)
    try:
        gz = f.read(2) == b"\x1f\x8b"
        f.seek(0)
    except BaseException:
        f.close()
        raise
    if not gz:
        return f
    size = os.fstat(f.fileno()).st_size
    return CappedReader(gzip.GzipFile(fileobj=f, mode="rb"), max(GZIP_FREE_BYTES, GZIP_MAX_RATIO * size),
                        Path(path), size)
