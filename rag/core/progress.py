"""Embedding progress for `rag index`: a bar on a terminal, plain lines otherwise.

The bar knows its total from the start (the indexer reports ``0/total`` before the first
batch) and works out its own ETA from the average rate, so it never shows ``?`` or
``-:--:--`` once embedding has begun. When stderr is not a terminal (CI, a log file), a
line such as ``embedding: 1200/3516 chunks from 120 files, 34 s`` is written at the start,
every ``every_s`` seconds or every tenth of the total, whichever comes first, and at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

Progress = Callable[[int, int, int], None]  # (chunks embedded, chunks to embed, files)


class PlainProgress:
    """Periodic one-line reports, for a stderr that is not a terminal."""

    def __init__(self, out: TextIO | None = None, *, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, what: str = "embedding",
                 unit: str = "chunks") -> None:
        self.out = out
        self.what, self.unit = what, unit
        self.every_s = every_s
        self.clock = clock
        self.started = clock()
        self._last_time: float | None = None
        self._last_tenth = -1

    def __call__(self, done: int, total: int, files: int | None = None) -> None:
        now = self.clock()
        tenth = done * 10 // total if total else 10
        due = (self._last_time is None or done >= total or tenth > self._last_tenth
               or now - self._last_time >= self.every_s)
        if not due:
            return
        self._last_time, self._last_tenth = now, tenth
        out = self.out or sys.stderr
        source = "" if files is None else f" from {files} file{'s' * (files != 1)}"
        out.write(f"{self.what}: {done}/{total} {self.unit}{source}, "
                  f"{now - self.started:.0f} s\n")
        out.flush()


def eta(done: int, total: int, elapsed: float) -> str:
    """Time left at the average rate so far, as H:MM:SS ('-' before the first batch)."""
    if done <= 0 or elapsed <= 0:
        return "-"
    left = round((total - done) * elapsed / done)
    return f"{left // 3600}:{left // 60 % 60:02d}:{left % 60:02d}"


@contextmanager
def index_progress(terminal: bool | None = None) -> Iterator[Progress]:
    """The progress callback for rag.indexer.indexing.build_index, for as long as the block runs."""
    if terminal is None:
        terminal = sys.stderr.isatty()
    if not terminal:
        yield PlainProgress()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("chunks {task.fields[rate]}"), TimeElapsedColumn(),
               TextColumn("ETA {task.fields[eta]}"))
    with Bar(*columns, transient=True) as bar:
        task = bar.add_task("reading and chunking files", total=None, rate="", eta="-")
        started: list[float] = []

        def update(done: int, total: int, files: int) -> None:
            if not started:
                started.append(time.perf_counter())
            elapsed = time.perf_counter() - started[0]
            rate = f"{done / elapsed:.0f}/s" if done and elapsed > 0 else ""
            bar.update(task, completed=done, total=total, rate=rate,
                       eta=eta(done, total, elapsed),
                       description=f"embedding {files} file{'s' * (files != 1)}")

        yield update
