"""An answer or search hits as text: plain and stable when piped, wrapped and coloured on a
terminal (rich). Both forms come from the same lines, and every string from a document or
the model goes through rag.core.terminal.one_line first, so nothing in them can act on the terminal
or forge a line of its own; rich only ever receives Text objects, never markup.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rag.core.terminal import one_line as safe
from rag.core.text import content_words
from rag.reader.fences import closes_fence
from rag.reader.inline import outside_code
from rag.reader.markdown import fence_run

if TYPE_CHECKING:
    from rich.console import Console

    from rag.core.records import Answer, Citation, SearchHit
    from rag.verifier.check import SentenceCheck

PREVIEW_LINES = 4  # quoted lines per citation; longer spans show the best few and "..."
Segment = tuple[str, str]  # (text, rich style)
Line = list[Segment]


def _labels(citations: Sequence[Citation]) -> str:
    return "".join(f" [{label}]" for label in dict.fromkeys(c.label for c in citations))


def preview(quoted: Sequence[tuple[int, str]], statements: Sequence[str],
            limit: int = PREVIEW_LINES) -> tuple[list[tuple[int, str]], int, int]:
    """At most ``limit`` of the cited lines: the run of non-blank lines that holds the most
    words of the statements they support, centred on the best single line when several
    runs hold as many; returns (lines, lines hidden above, lines hidden below). Words are
    the content words the support check reads (rag.core.text.content_words)."""
    if len(quoted) <= limit:
        return list(quoted), 0, 0
    lines = [q for q in quoted if q[1].strip()] or list(quoted)
    wanted = set().union(*(content_words(s) for s in statements)) if statements else set()
    words = [content_words(text) & wanted for _, text in lines]
    best = max(range(len(lines)), key=lambda i: (len(words[i]), -i))

    def score(start: int) -> tuple[int, float]:
        held = set().union(*words[start:start + limit])
        return len(held), -abs(start + (limit - 1) / 2 - best)

    start = max(range(max(len(lines) - limit, 0) + 1), key=score)
    shown = lines[start:start + limit]
    return shown, shown[0][0] - quoted[0][0], quoted[-1][0] - shown[-1][0]


CONTINUATION = "    "  # a statement's second and later lines (a quoted code block)


# Markdown emphasis in quoted prose ("**FastAPI**", "*path operation*", "_package_"); an
# underscore inside a snake_case name is no emphasis.
_EMPHASIS = re.compile(r"\*\*([^*\s](?:[^*\n]*[^*\s])?)\*\*"
                       r"|(?<![\w*])\*([^*\s](?:[^*\n]*[^*\s])?)\*(?![\w*])"
                       r"|(?<!\w)_([^_\s](?:[^_\n]*[^_\s])?)_(?!\w)")


def _unemphasised(line: str) -> str:
    return outside_code(line, lambda prose: _EMPHASIS.sub(
        lambda m: m.group(1) or m.group(2) or m.group(3), prose))


def statement_lines(text: str, labels: str) -> list[Line]:
    """A statement, its labels after its last line. A quote that spans lines (a code block)
    keeps its lines, each indented by four spaces, so no line of it can pass for a line of
    the answer's own (a citation, "Citations:"); every line is escaped as one line. Prose is
    bold, without its Markdown emphasis markers; code, between its fences, is not."""
    out: list[Line] = []
    fence = ""
    for n, line in enumerate(text.split("\n")):
        opens = fence_run(line.lstrip())
        code = bool(fence) or bool(opens)
        if opens and not fence:
            fence = opens
        elif fence and closes_fence(line, fence):
            fence = ""
        shown = safe(line) if code else safe(_unemphasised(line))
        out.append([(f"{CONTINUATION if n else ''}{shown}", "" if code else "bold")])
    out[-1].append((labels, "cyan"))
    return out


def answer_lines(answer: Answer, docs_root: Path | None = None) -> list[Line]:
    """The answer, statement by statement, each followed by its labels, then each citation as
    path:start-end (heading) with a preview of its lines, checked against the file now."""
    from rag.reader.formats import place_in_file
    from rag.verifier.verification import cited_text, quote_lines

    lines: list[Line] = []
    if answer.extractive_fallback:
        fallback = "[extractive answer: the model's answer failed verification or was unusable]"
        lines.append([(fallback, "yellow")])
    for s in answer.statements:
        lines.extend(statement_lines(s.text, _labels(s.citations)))
    if not answer.statements:  # "insufficient evidence", or a model's plain answer
        lines.append([(safe(answer.answer), "bold yellow" if answer.insufficient_evidence
                       else "bold")])
    lines.extend([("[unsupported, not part of the answer] ", "red"), (safe(s.text), ""),
                  (f" ({safe(s.reason)})" if s.reason else "", "dim")]
                 for s in answer.unsupported)
    if answer.insufficient_evidence and answer.evidence:
        lines += [[], [("Closest evidence:", "bold")]]
        lines.extend([(f"  {safe(e.chunk.source_path)}:{e.chunk.start_line}-{e.chunk.end_line}",
                       "green"), (f" ({safe(e.chunk.heading or '-')})", "dim")]
                     for e in answer.evidence[:3])
    if answer.citations:
        lines += [[], [("Citations:", "bold")]]
    by_label = {e.label: e for e in answer.evidence}
    cache: dict[str, list[str] | None] = {}
    for c in answer.citations:
        lines.append([(f"  [{c.label}] ", "cyan"),
                      (f"{safe(c.source_path)}:{c.start_line}-{c.end_line}", "green"),
                      (f" ({safe(c.heading or '-')})", "dim")])
        quoted: list[tuple[int, str]] = []
        note: str | None = "the docs folder is unknown"
        if docs_root is not None:
            chunk = by_label[c.label].chunk
            quoted, note = quote_lines(docs_root, c.source_path, c.start_line, c.end_line,
                                       cited_text(chunk, c.start_line, c.end_line), cache,
                                       cols=(chunk.start_col, chunk.end_col))
        if note is not None:
            lines.append([(f"        ({safe(note)})", "dim")])
            continue
        place = place_in_file(c.source_path, cache.get(c.source_path) or [], c.start_line,
                              c.end_line, by_label[c.label].chunk.format)
        if place:  # a notebook: the cell and its lines, as the notebook shows them
            lines[-1].insert(2, (f" [{place}]", "green"))
        supported = [s.text for s in answer.statements if any(
            (x.label, x.start_line, x.end_line) == (c.label, c.start_line, c.end_line)
            for x in s.citations)]
        shown, above, below = preview(quoted, supported)
        if above:
            lines.append([(f"          | ... ({above} line{'s' * (above > 1)} above)", "dim")])
        lines.extend([(f"    {n:>5} | ", "dim"), (safe(text), "")] for n, text in shown)
        if below:
            lines.append([(f"          | ... ({below} more line{'s' * (below > 1)})", "dim")])
    if any(reason == "budget" for _, reason in answer.excluded):
        lines += [[], [("(some evidence was left out to fit the model's context)", "dim")]]
    return lines


def hit_lines(hits: Sequence[SearchHit]) -> list[Line]:
    """`rag search`: path:start-end  heading  score, then the start of the chunk."""
    lines: list[Line] = []
    for hit in hits:
        c = hit.chunk
        lines.append([(f"{safe(c.source_path)}:{c.start_line}-{c.end_line}", "green"),
                      (f"  {safe(c.heading or '-')}", "bold"), (f"  {hit.score:.4f}", "dim")])
        lines.append([(f"    {safe(' '.join(c.text.split())[:160])}", "")])
    return lines


_STATUS_STYLE = {"supported": "green", "conflicting": "bold red", "not_found": "yellow"}


def check_lines(checks: Sequence[SentenceCheck], name: str) -> list[Line]:
    """`rag check`: each sentence with its status and where it stands in the text, then why
    (unless supported) and the docs' lines it was held against; a count at the end."""
    lines: list[Line] = []
    for check in checks:
        lines.append([(f"{check.status:<12}", _STATUS_STYLE[check.status]),
                      (f"{safe(name)}:{check.line}: ", "dim"), (safe(check.text), "bold")])
        if check.reason:
            lines.append([(f"{'':12}{safe(check.reason)}", "dim")])
        for cited in check.citations:
            place = f"{safe(cited.source_path)}:{cited.start_line}-{cited.end_line}"
            lines.append([(f"{'':12}{place}", "green"),
                          (f" ({safe(cited.heading or '-')})", "dim")])
            numbered = list(enumerate(cited.text.split("\n"), start=cited.start_line))
            shown, above, below = preview(numbered, [check.text])
            if above:
                lines.append([(f"{'':18}| ... ({above} line{'s' * (above > 1)} above)", "dim")])
            lines.extend([(f"{'':12}{n:>5} | ", "dim"), (safe(text), "")] for n, text in shown)
            if below:
                lines.append([(f"{'':18}| ... ({below} more line{'s' * (below > 1)})", "dim")])
    counts = {s: sum(c.status == s for c in checks) for s in _STATUS_STYLE}
    total = (f"{counts['supported']} supported, {counts['conflicting']} conflicting, "
             f"{counts['not_found']} not found")
    lines.append([(total, "bold")])
    return lines


def plain(lines: Sequence[Line]) -> str:
    """The piped form: no colour, no wrapping, the same text on every machine."""
    return "\n".join("".join(text for text, _ in line) for line in lines)


def show(lines: Sequence[Line], console: Console) -> None:
    """The terminal form: wrapped to the console's width, coloured."""
    from rich.text import Text

    for line in lines:
        console.print(Text.assemble(*line), highlight=False)


def render_answer(answer: Answer, docs_root: Path | None = None) -> str:
    return plain(answer_lines(answer, docs_root))
