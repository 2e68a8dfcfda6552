"""Re-check a saved answer's citations against the docs as they are now (`rag verify`, /verify).

Each citation is checked against the text recorded for it in the saved answer, not against
chunk boundaries, so a line-precise citation is checked line for line:

- ``exact``: the file still holds that text at the cited lines;
- ``moved``: the same lines are in the file at another range (reported as the new range);
- ``changed``: the file no longer holds that text anywhere;
- ``gone``: the file is missing or unreadable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from rag.errors import CitationError, RagError, UsageError
from rag.paths import check_inside, check_relative
from rag.records import Answer, Chunk

Status = Literal["exact", "moved", "changed", "gone"]
EXIT_NOT_EXACT = CitationError.exit_code  # 8: some citation no longer matches the docs


@dataclass(frozen=True)
class Recheck:
    label: str
    source_path: str
    start_line: int
    end_line: int
    heading: str | None
    status: Status
    new_start_line: int | None = None  # where a moved citation's lines are now
    new_end_line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        where = f"{self.source_path}:{self.start_line}-{self.end_line}"
        moved = f" -> {self.new_start_line}-{self.new_end_line}" if self.status == "moved" else ""
        return f"[{self.label}] {self.status:<7} {where}{moved}"


def _cut(chunk: Chunk, start: int, end: int) -> str:
    """Lines start-end of a chunk's text (a citation's range lies inside its chunk)."""
    lines = chunk.text.split("\n")
    return "\n".join(lines[start - chunk.start_line:end - chunk.start_line + 1])


def answer_json(answer: Answer, docs_root: Path | None) -> dict[str, Any]:
    """`rag ask --json`: the Answer, each citation with the text it cites, the docs folder."""
    data = answer.to_dict()
    by_label = {e.label: e.chunk for e in answer.evidence}
    cited = list(data["citations"])
    for key in ("statements", "unsupported"):
        for statement in data[key]:
            cited.extend(statement["citations"])
    for c in cited:
        chunk = by_label.get(c["label"])
        c["text"] = _cut(chunk, c["start_line"], c["end_line"]) if chunk else ""
    data["docs_root"] = str(docs_root.resolve()) if docs_root else None
    return data


def file_lines(docs: Path, source_path: str) -> tuple[Path, list[str] | None]:
    """(real path, lines numbered as the chunker numbers them, or None when unreadable).

    A path that is absolute, has ``..`` or resolves outside the docs folder raises AccessError.
    """
    from rag.chunking import parse_document

    rel = check_relative(source_path, "cited file")
    real = check_inside(docs / rel, docs, "cited file")
    try:
        return real, parse_document(real.read_bytes().decode("utf-8-sig")).lines
    except (OSError, UnicodeDecodeError):
        return real, None


def locate(lines: list[str] | None, start: int, end: int, text: str) -> tuple[Status, int, int]:
    """Status of one cited range, and where its text is now (the old range unless moved)."""
    if lines is None:
        return "gone", start, end
    wanted = text.split("\n")
    if 1 <= start and end <= len(lines) and lines[start - 1:end] == wanted:
        return "exact", start, end
    n = len(wanted)
    found = [i + 1 for i in range(len(lines) - n + 1) if lines[i:i + n] == wanted]
    if not found:
        return "changed", start, end
    new = min(found, key=lambda s: abs(s - start))  # the nearest copy, if there are several
    return "moved", new, new + n - 1


def _recorded_text(citation: dict[str, Any], evidence: dict[str, dict[str, Any]]) -> str:
    """The text a saved citation cites: its own `text`, the server's `lines`, or the evidence."""
    if isinstance(citation.get("text"), str):
        return str(citation["text"])
    if isinstance(citation.get("lines"), list) and citation["lines"]:
        return "\n".join(str(line.get("text", "")) for line in citation["lines"])
    ev = evidence.get(str(citation.get("label")))
    if ev is not None and isinstance(ev.get("text"), str):
        lines = ev["text"].split("\n")
        first = int(citation["start_line"]) - int(ev.get("start_line", 1))
        return "\n".join(lines[first:first + int(citation["end_line"])
                               - int(citation["start_line"]) + 1])
    raise UsageError(f"citation {citation.get('label')!r} has no recorded text to check; "
                   "save answers with `rag ask --json`")


def _citations(data: dict[str, Any]) -> list[dict[str, Any]]:
    if not isinstance(data, dict) or not isinstance(data.get("citations"), list):
        raise UsageError("not a saved answer: no `citations` list (save one with `rag ask --json`)")
    out = list(data["citations"])
    for statement in data.get("statements") or []:
        out.extend(statement.get("citations") or [] if isinstance(statement, dict) else [])
    seen: dict[tuple[str, int, int], dict[str, Any]] = {}
    for c in out:
        try:
            key = (str(c["source_path"]), int(c["start_line"]), int(c["end_line"]))
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"citation {c!r:.60} lacks source_path, start_line or end_line") \
                from None
        seen.setdefault(key, c)
    return list(seen.values())


def recheck_answer(
    data: dict[str, Any], docs: Path, *, may_see: Callable[[str, list[str] | None], bool]
    | None = None,
) -> list[Recheck]:
    """Check every citation of a saved answer (deduplicated by range) against ``docs``.

    ``may_see(path, lines)`` (HTTP) decides whether the caller may learn anything about a
    file; a citation to one they may not see fails the whole check with AccessError.
    """
    from rag.errors import AccessError

    evidence = {str(e.get("label")): e for e in data.get("evidence") or [] if isinstance(e, dict)}
    out: list[Recheck] = []
    for c in _citations(data):
        text = _recorded_text(c, evidence)
        _, lines = file_lines(docs, str(c["source_path"]))
        if may_see is not None and not may_see(str(c["source_path"]), lines):
            raise AccessError(f"citation {str(c.get('label'))!r:.20} points to a source you "
                              "may not see")
        status, start, end = locate(lines, int(c["start_line"]), int(c["end_line"]), text)
        moved = status == "moved"
        out.append(Recheck(str(c.get("label", "")), str(c["source_path"]), int(c["start_line"]),
                           int(c["end_line"]), c.get("heading"), status,
                           start if moved else None, end if moved else None))
    return out


def restricted_to(rel: str, chunks: Iterable[Any], manifest_groups: Iterable[str],
                  lines: list[str] | None, settings: Any) -> list[tuple[str, ...]]:
    """Every group set that restricts a file: from the index, the config, its front matter now.

    A caller may see the file only when they are in one group of each set (fail closed: the
    index and the file on disk may disagree until the next re-index).
    """
    from rag.chunking import parse_document
    from rag.indexing import visibility_for
    from rag.visibility import NOBODY, UnclearVisibility, read_visibility

    sets = [tuple(c.visibility) for c in chunks if c.source_path == rel and c.visibility]
    sets.append(visibility_for(rel, list(manifest_groups), settings))
    if lines is not None:
        text = "\n".join(lines)
        parsed = parse_document(text)
        try:
            front = read_visibility(text, parsed)
        except UnclearVisibility:
            front = NOBODY  # the indexer leaves such a file out: nobody may read it
        sets.append(visibility_for(rel, list(front), settings))
    return [s for s in sets if s]


def may_see(groups: frozenset[str], restrictions: list[tuple[str, ...]]) -> bool:
    return all(not groups.isdisjoint(s) for s in restrictions)


_SAVED_ANSWER_SCHEMA: dict[str, Any] = {
    "required": ["citations"],
    "properties": {"citations": {"type": "array", "items": {
        "type": "object", "required": ["source_path", "start_line", "end_line"],
        "properties": {"source_path": {"type": "string", "minLength": 1},
                       "start_line": {"type": "integer", "minimum": 1},
                       "end_line": {"type": "integer", "minimum": 1},
                       "text": {"type": "string"},
                       "lines": {"type": "array", "minItems": 1, "items": {
                           "type": "object", "properties": {"text": {"type": "string"}}}}},
        "anyOf": [{"required": ["text"]}, {"required": ["lines"]}]}}},
}


class VerifyRequest(BaseModel):
    answer: dict[str, Any] = Field(..., description="A saved answer, as `rag ask --json` "
                                   "prints it or `POST /ask` returns it.",
                                   json_schema_extra=_SAVED_ANSWER_SCHEMA)
    groups: list[str] = Field(default_factory=list, description="Groups of the asking user.")

    @field_validator("answer")
    @classmethod
    def _has_citations(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            _citations(value)
        except RagError as exc:
            raise ValueError(str(exc)) from None
        return value


class RecheckOut(BaseModel):
    label: str
    source_path: str
    start_line: int
    end_line: int
    heading: str | None
    status: Status
    new_start_line: int | None
    new_end_line: int | None


class VerifyOut(BaseModel):
    all_exact: bool
    citations: list[RecheckOut]


def verify_payload(request: VerifyRequest, docs: Path, version: Any,
                   settings: Any) -> dict[str, Any]:
    """`POST /verify`: recheck with the visibility of the caller's groups, over one version."""
    groups = frozenset(g.strip() for g in request.groups if g.strip())

    exts = tuple(e.lower() for e in settings.docs.extensions)

    def allowed(rel: str, lines: list[str] | None) -> bool:
        if any(p.startswith(".") for p in rel.split("/")) or not rel.lower().endswith(exts):
            return False  # only docs files: never an oracle for other files in the folder
        entry = version.manifest.files.get(rel)
        front = entry.visibility if entry is not None else []
        return may_see(groups, restricted_to(rel, version.chunks, front, lines, settings))

    checks = recheck_answer(request.answer, docs, may_see=allowed)
    return {"all_exact": all(c.status == "exact" for c in checks),
            "citations": [c.to_dict() for c in checks]}


def verify_file(path: Path, docs: Path | None, settings: Any, *, json_out: bool,
                echo: Callable[[str], None]) -> int:
    """`rag verify`: print one line per citation (or JSON); 0 when all are exact, else 8."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RagError(f"{path}: not a readable JSON answer ({exc})") from None
    if docs is None:
        saved = data.get("docs_root") if isinstance(data, dict) else None
        docs = Path(saved) if isinstance(saved, str) and saved else Path(settings.docs.root)
    checks = recheck_answer(data, docs)
    exact = all(c.status == "exact" for c in checks)
    if json_out:
        echo(json.dumps({"docs_root": str(docs), "all_exact": exact,
                         "citations": [c.to_dict() for c in checks]}, ensure_ascii=False))
    elif not checks:
        echo("no citations to check")
    else:
        for c in checks:
            echo(c.line())
    return 0 if exact else EXIT_NOT_EXACT
