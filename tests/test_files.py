"""The one atomic write: the file is the old one or the new one, never part of either."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rag.core.files import atomic_write


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_text_bytes_and_a_writer_function_each_replace_the_file_whole(tmp_path: Path) -> None:
    dest = tmp_path / "CURRENT"
    atomic_write(dest, "v-1")
    assert dest.read_text(encoding="utf-8") == "v-1"
    atomic_write(dest, "v-2 \u00e9".encode())
    assert dest.read_text(encoding="utf-8") == "v-2 \u00e9"
    atomic_write(dest, lambda tmp: tmp.write_bytes(b"written by a library"))
    assert dest.read_bytes() == b"written by a library"
    assert [p.name for p in tmp_path.iterdir()] == ["CURRENT"]  # no temporary file left


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_a_given_mode_is_exact_whatever_the_umask(tmp_path: Path, mode: int) -> None:
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "f", "x", mode=mode)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "f") == mode


def test_without_a_mode_the_file_gets_what_the_umask_gives(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "f", "x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "f") == 0o640


def test_an_interrupted_write_leaves_the_old_file_and_nothing_else(tmp_path: Path) -> None:
    dest = tmp_path / "model.onnx"
    dest.write_bytes(b"the old model")

    def crash(tmp: Path) -> None:
        tmp.write_bytes(b"half a model")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(dest, crash)
    assert dest.read_bytes() == b"the old model"
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_a_failed_write_of_a_new_file_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        atomic_write(tmp_path / "f", lambda tmp: (_ for _ in ()).throw(OSError("disk full")))
    assert list(tmp_path.iterdir()) == []
