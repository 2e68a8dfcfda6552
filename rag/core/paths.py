"""Path rules: nothing is read or written outside the roots the user chose.

The rules, in one place:

- **Docs-relative paths** that come from files (an eval case's ``expected_sources``, a
  citation a client asks to open) must stay under the docs root: no absolute path, no
  ``..`` component, no surrounding spaces, no control character such as a NUL byte
  (``check_relative``). Once joined to the root,
  the resolved result must still be inside it, so a symlink cannot lead out either
  (``check_inside``).
- **Index paths** come from the user (``--index``, the server's settings). They may be
  absolute, because the user chose them, but may not contain a ``..`` component at all
  (``check_index_path``): ``indexes/../../tmp/x`` is far more likely a mistake or an
  attack than an intention, and a rule without exceptions is easy to state and to test.
- **Symlinks in the docs folder** are followed only when their target resolves inside
  the docs root (``follow_link``). A file is a Source once, under its real path relative
  to the real docs root (``real_relative``), however many links reach it; so a link in a
  public folder cannot give a restricted file a second, public path, and path patterns in
  ``visibility.groups_by_path`` always match where the file really is.
- **The user cache** (``user_cache()``) holds cached indexes, that is the docs' text: its
  folders are 0700 and the index files written in them 0600 (``private_dir``,
  ``keep_private``), so other users of the machine read nothing there. An index the user
  placed elsewhere with ``--index`` keeps the permissions the user's umask gives it.

Every check raises AccessError whose message is one line that names the offending path.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path, PurePosixPath

from rag.core.errors import AccessError


def is_inside(path: Path, root: Path) -> bool:
    """True when ``path`` is ``root`` or below it; both must already be resolved."""
    return path == root or root in path.parents


def check_inside(path: Path, root: Path, what: str) -> Path:
    """The resolved ``path``, or AccessError when it resolves outside ``root``.

    Symlinks on the way are resolved first, so a link inside the root that points out is
    caught too. ``what`` names the path for the message ("cited file", "eval source").
    """
    real_root = root.resolve()
    try:
        real = path.resolve()
    except (ValueError, OSError) as exc:  # a NUL byte, a symlink loop
        raise AccessError(f"{what} {str(path)!r} cannot be opened: {exc}") from None
    if not is_inside(real, real_root):
        raise AccessError(f"{what} {path} is outside {root}")
    return real


def check_relative(path: str, what: str = "path") -> str:
    """A docs-relative posix path, or AccessError for anything that could leave the root."""
    posix = PurePosixPath(path.replace("\\", "/"))
    if posix.is_absolute() or ".." in posix.parts or not posix.parts or path.strip() != path \
            or any(ord(c) < 32 for c in path):  # a NUL byte or a line break is no file name
        raise AccessError(f"{what} {path!r} is outside the docs folder")
    return str(posix)


def check_index_path(path: Path) -> Path:
    """The index path unchanged, or AccessError when it has a ``..`` component.

    Absolute paths are fine (the user chose them); ``..`` anywhere is rejected, even
    where it would stay inside (``indexes/../indexes/x``): write that as ``indexes/x``.
    """
    if ".." in path.parts:
        raise AccessError(
            f"index path {path} contains '..'; give the index folder without '..' "
            "(an absolute path is fine)"
        )
    return path


def follow_link(link: Path, real_root: Path, name: str | None = None) -> Path:
    """The real target of a symlink in the docs folder, if it stays inside the root.

    ``real_root`` must be resolved. ``name`` (default: the link path) starts the message,
    so a walker can report ``skipped <name>: ...`` from the exception text.
    """
    label = name or str(link)
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):
        raise AccessError(f"{label}: broken symlink or symlink loop") from None
    if not is_inside(target, real_root):
        raise AccessError(f"{label}: symlink points outside the docs folder")
    return target


def real_relative(path: Path, real_root: Path) -> str:
    """The Source path of a file: its real location relative to the (resolved) docs root."""
    return path.resolve().relative_to(real_root).as_posix()


def user_cache() -> Path:
    """The project's folder in the user's cache (``$XDG_CACHE_HOME/rag``, else
    ``~/.cache/rag``): cached indexes, the local model's copy, the model server's record."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rag"


PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def in_user_cache(path: Path) -> bool:
    """True for the user cache folder and everything below it."""
    cache, real = Path(os.path.abspath(user_cache())), Path(os.path.abspath(path))
    return real == cache or cache in real.parents


def private_dir(path: Path) -> Path:
    """``path`` (in the user cache) as a folder only its owner can enter, made if missing.

    Every folder made on the way is created 0700 (``~/.cache`` too, as the XDG spec asks);
    the cache's own folders are tightened to 0700 where an older version left them 0755.
    Folders above the cache that already exist are the user's and are left alone.
    """
    for folder in reversed([path, *path.parents]):
        if not folder.is_dir():
            with contextlib.suppress(FileExistsError):  # another process was quicker
                folder.mkdir(mode=PRIVATE_DIR)
        if in_user_cache(folder) and stat.S_IMODE(folder.stat().st_mode) != PRIVATE_DIR:
            folder.chmod(PRIVATE_DIR)
    return path


def make_dir(path: Path) -> Path:
    """``mkdir -p``, except that in the user cache the folders are private (``private_dir``)."""
    if in_user_cache(path):
        return private_dir(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def keep_private(root: Path) -> None:
    """Folders 0700 and files 0600 under ``root`` when it is in the user cache; else nothing.

    The 0700 folders already keep others out; this keeps the files private too should a
    folder be copied or opened up later. Symlinks are skipped (chmod would follow them).
    """
    if not in_user_cache(root):
        return
    for folder, _, files in os.walk(root):
        for path, mode in [(folder, PRIVATE_DIR)] + [
                (os.path.join(folder, name), PRIVATE_FILE) for name in files]:
            with contextlib.suppress(FileNotFoundError):  # an old version being removed
                if not os.path.islink(path) and stat.S_IMODE(os.stat(path).st_mode) != mode:
                    os.chmod(path, mode)
