"""The one atomic write: a file is replaced whole, so that no reader and no crash ever
finds part of one.

Every file that is rewritten in place goes through :func:`atomic_write`: an index's
``CURRENT`` pointer and freshness record, the tokens file, the ONNX export and the local
model's copy in the cache. The new content goes to a temporary file beside the target,
is flushed to disk, and is renamed over the target; the folder is flushed too, so the
rename itself survives a power cut.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

TEMPORARY_SUFFIX = ".tmp"  # .<name>.<random>.tmp beside the target, until the rename


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(dest: Path, data: str | bytes | Callable[[Path], None], *,
                 mode: int | None = None) -> None:
    """Replace ``dest`` with ``data`` (text is written as UTF-8) all at once.

    ``data`` may instead be a function that writes the temporary file at the path it is
    given, for libraries that write files themselves. ``mode`` is the new file's exact
    permissions; None gives what ``open()`` would (0666 less the umask). On any error,
    an interrupt included, the temporary file is removed and ``dest`` is left as it was.
    """
    # With a mode given, the file is private until it gets that mode: never wider on the way.
    tmp, fd = _create_beside(dest, 0o666 if mode is None else 0o600)
    try:
        if callable(data):
            os.close(fd)
            fd = -1
            data(tmp)
            fd = os.open(tmp, os.O_RDONLY)
        else:
            view = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(dest.parent)


def _create_beside(dest: Path, mode: int) -> tuple[Path, int]:
    """A new, empty temporary file in dest's folder, and a descriptor open for writing."""
    while True:
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}{TEMPORARY_SUFFIX}")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        except FileExistsError:
            continue
