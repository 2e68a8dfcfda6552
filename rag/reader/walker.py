"""Which files under the docs folder are Sources, and reading them without surprises.

- Only files with a configured extension, outside hidden folders (``.git`` ...).
- Symlinks are followed when they stay inside the docs root, once each; loops and links
  that leave the root are reported and skipped (rules in :mod:`rag.core.paths`).
- Names that are not valid UTF-8 are skipped with one warning (the name shown escaped).
- Paths that are hard links to one file (same device and inode) give it once, under the
  first path in sorted order; the others are reported as its aliases so the indexer can
  apply every path's visibility rule.
- Only regular files are read: a FIFO or device named ``x.md`` is skipped with a warning,
  never opened for a blocking or endless read.

Every problem is one warning line; the rest of the folder is still indexed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

from rag.core.errors import AccessError
from rag.core.paths import follow_link, real_relative


def walk_docs(root: Path, extensions: Sequence[str]) -> tuple[list[tuple[str, Path]], list[str]]:
    """(relative posix path, real path) of every Markdown file, plus warnings.

    See walk_sources, which also says which paths were hard links to the same file.
    """
    files, _, warnings = walk_sources(root, extensions)
    return files, warnings


def walk_sources(
    root: Path, extensions: Sequence[str]
) -> tuple[list[tuple[str, Path]], dict[str, list[str]], list[str]]:
    """Files as (relative posix path, real path), the other paths of hard-linked ones, warnings.

    Symlinks are followed when they stay inside the docs root, once each; loops and links
    that leave the root are reported and skipped. Hidden folders (.git, ...) and names
    that are not valid UTF-8 are skipped. Paths that are hard links to one file give it
    once, under the first path in sorted order; the others are listed for it.
    """
    real_root = root.resolve()
    found: dict[str, Path] = {}
    warnings: list[str] = []
    seen_dirs: set[Path] = set()
    exts = tuple(e.lower() for e in extensions)

    def visit(folder: Path, rel: str) -> None:
        real = folder.resolve()
        if real in seen_dirs:
            warnings.append(f"skipped {rel or '.'}: symlink loop or folder already indexed")
            return
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            warnings.append(f"skipped folder {rel or '.'}: {exc.strerror}")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            child = f"{rel}/{entry.name}" if rel else entry.name
            if not _valid_name(entry.name):
                shown = os.fsencode(child).decode("utf-8", "backslashreplace")
                warnings.append(f"skipped {shown}: file name is not valid UTF-8")
                continue
            if entry.is_symlink():
                try:
                    follow_link(path, real_root, child)
                except AccessError as exc:
                    warnings.append(f"skipped {exc}")
                    continue
            if entry.is_dir():
                visit(path, child)
            elif entry.name.lower().endswith(exts):
                # Keyed by the real path: a file reached through links is one Source, and
                # visibility patterns match where it really is, not where a link put it.
                found.setdefault(real_relative(path, real_root), path.resolve())

    visit(root, "")
    files, aliases = _one_path_per_file(sorted(found.items()), warnings)
    return files, aliases, warnings


def _valid_name(name: str) -> bool:
    try:
        name.encode("utf-8")  # undecodable bytes arrive as lone surrogates
    except UnicodeEncodeError:
        return False
    return True


def _one_path_per_file(
    files: list[tuple[str, Path]], warnings: list[str]
) -> tuple[list[tuple[str, Path]], dict[str, list[str]]]:
    """Keep the first path of each (device, inode); the others become its aliases."""
    first: dict[tuple[int, int], str] = {}
    aliases: dict[str, list[str]] = {}
    kept: list[tuple[str, Path]] = []
    for rel, path in files:
        try:
            info = path.stat()
        except OSError:
            kept.append((rel, path))  # read_text reports it
            continue
        key = (info.st_dev, info.st_ino)
        if key in first and stat.S_ISREG(info.st_mode):
            aliases.setdefault(first[key], []).append(rel)
            warnings.append(f"{rel} is a hard link to {first[key]}: indexed once, as "
                            f"{first[key]}, visible only where both paths allow")
            continue
        first.setdefault(key, rel)
        kept.append((rel, path))
    return kept, aliases


def _read_regular(path: Path, rel: str, max_bytes: int) -> tuple[bytes | None, str | None]:
    """The bytes of a regular file, or a warning; a FIFO or device is never read.

    Checked before opening (so nothing else is opened) and again on the open file, which
    O_NONBLOCK keeps from waiting on a FIFO swapped in between.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None, f"skipped {rel}: not a regular file"
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None, f"skipped {rel}: not a regular file"
        if info.st_size > max_bytes:
            return None, f"skipped {rel}: {info.st_size} bytes is over docs.max_file_bytes"
        raw = fh.read(max_bytes + 1)
    if len(raw) > max_bytes:
        return None, f"skipped {rel}: over docs.max_file_bytes"
    return raw, None


def read_text(path: Path, rel: str, max_bytes: int) -> tuple[str | None, bytes | None, str | None]:
    """(text, raw bytes, warning): text is None when the file cannot be indexed."""
    try:
        raw, problem = _read_regular(path, rel, max_bytes)
        if raw is None:
            return None, None, problem
    except PermissionError:
        return None, None, f"skipped {rel}: permission denied"
    except OSError as exc:
        return None, None, f"skipped {rel}: cannot read ({exc.strerror})"
    if b"\x00" in raw[:8192]:
        return None, None, f"skipped {rel}: binary file, not text"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return None, None, f"skipped {rel}: not valid UTF-8 (byte {exc.start}); save it as UTF-8"
    if not text.strip():
        return text, raw, f"{rel} is empty: nothing to index"
    return text, raw, None
