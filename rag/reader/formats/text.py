"""Plain text: paragraphs between blank lines; underlined and numbered titles as headings.

- An **underlined title** is one line over a line of one repeated mark (``=``, ``-``, ``~``,
  ``*``, ``#``, ``^``, ``+``), at least three long and at least as long as most of the title;
  the same mark above it too (an overline) is allowed. Marks rank by first use, as in
  reStructuredText: the first one used is level 1.
- A **numbered title** is a paragraph of one short line such as ``2.1 Setting up`` or
  ``3. Usage`` (a number, dotted parts allowed, then a capital letter, no final full
  stop); its level is its number of parts.
- Lines of a paragraph that start with ``-``, ``*``, ``+`` or ``1.`` are list items.
"""

from __future__ import annotations

import re

from rag.reader.formats.base import HEADING, ITEM, PARAGRAPH, FileBlock, Reader

_UNDERLINE = re.compile(r"([=\-~*#^+])\1{2,}")
_NUMBERED = re.compile(r"((?:\d{1,3}\.)*\d{1,3})\.?\s+([A-Z][^\n]{0,78})")
_ITEM = re.compile(r"\s*(?:[-*+\u2022]|\d{1,3}[.)])\s+\S")
MAX_TITLE_CHARS = 80


def _underline(line: str, title: str) -> str | None:
    mark = _UNDERLINE.fullmatch(line.strip())
    if mark is None or not title.strip() or len(line.strip()) * 4 < len(title.strip()) * 3:
        return None
    return mark[1]


class TextReader(Reader):
    """``.txt`` files no Sphinx configuration claims."""

    name = "text"

    def blocks(self, lines: list[str], path: str) -> list[FileBlock]:
        out: list[FileBlock] = []
        marks: list[str] = []  # underline marks in order of first use (level = index + 1)
        stack: list[tuple[int, str]] = []
        i = 0

        def open_heading(level: int, name: str, at: int, end: int) -> None:
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, name))
            out.append(FileBlock(HEADING, at + 1, end + 1, (name,),
                                 tuple(n for _, n in stack), level))

        while i < len(lines):
            if not lines[i].strip():
                i += 1
                continue
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            para = list(range(i, j))  # a run of non-blank lines
            k = 0
            while k < len(para):
                n = para[k]
                title = lines[n].strip()
                rule = _UNDERLINE.fullmatch(title)
                if rule and k + 2 < len(para) and lines[n + 2].strip() == title \
                        and not _UNDERLINE.fullmatch(lines[n + 1].strip()):  # ===, Title, ===
                    mark = "over" + rule[1]
                    marks += [mark] if mark not in marks else []
                    open_heading(marks.index(mark) + 1, lines[n + 1].strip()[:MAX_TITLE_CHARS],
                                 n + 1, n + 2)
                    k += 3
                    continue
                under = _underline(lines[n + 1], title) if k + 1 < len(para) else None
                if under and len(title) <= MAX_TITLE_CHARS and not _UNDERLINE.fullmatch(title):
                    marks += [under] if under not in marks else []
                    open_heading(marks.index(under) + 1, title, n, n + 1)
                    k += 2
                    continue
                break
            rest = para[k:]
            numbered = _NUMBERED.fullmatch(lines[rest[0]].strip()) if len(rest) == 1 else None
            if numbered and not numbered[2].rstrip().endswith("."):
                level = numbered[1].count(".") + 1
                open_heading(level, lines[rest[0]].strip(), rest[0], rest[0])
            elif rest:
                self._paragraph(lines, rest, out, tuple(n for _, n in stack))
            i = j
        return out

    @staticmethod
    def _paragraph(lines: list[str], rows: list[int], out: list[FileBlock],
                   path: tuple[str, ...]) -> None:
        """A paragraph, or the list items it is made of."""
        groups: list[list[int]] = []
        for n in rows:
            if _ITEM.match(lines[n]) or not groups:
                groups.append([n])
            else:
                groups[-1].append(n)
        items = _ITEM.match(lines[rows[0]]) is not None
        if not items:  # prose that a list follows: the prose is one paragraph
            first_item = next((g for g in groups[1:] if _ITEM.match(lines[g[0]])), None)
            head = rows if first_item is None else rows[:rows.index(first_item[0])]
            out.append(FileBlock(PARAGRAPH, head[0] + 1, head[-1] + 1,
                                 tuple(lines[n].strip() for n in head), path))
            groups = [g for g in groups if g[0] > head[-1]]
        for group in groups:
            shown = tuple(lines[n].strip() for n in group)
            out.append(FileBlock(ITEM, group[0] + 1, group[-1] + 1, shown, path))
