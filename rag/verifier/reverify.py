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

from rag.core.errors import EXIT_NOT_VERIFIED, RagError, UsageError
from rag.core.records import Answer, Chunk
from rag.reader.docfiles import DocsGate

Status = Literal["exact", "moved", "changed", "gone"]
EXIT_NOT_EXACT = EXIT_NOT_VERIFIED  # 8: some citation no longer matches the docs


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
    """`rag ask --json`: the Answer, each citation with the text it cites (and, in a
    notebook, its cell: rag.verifier.verification.cell_fields), the docs folder."""
    from rag.verifier.verification import cell_fields

    data = answer.to_dict()
    by_label = {e.label: e.chunk for e in answer.evidence}
    cited = list(data["citations"])
    for key in ("statements", "unsupported"):
        for statement in data[key]:
            cited.extend(statement["citations"])
    files: dict[str, list[str] | None] = {}
    for c in cited:
        chunk = by_label.get(c["label"])
        c["text"] = _cut(chunk, c["start_line"], c["end_line"]) if chunk else ""
        if chunk is not None and docs_root is not None:
            c.update(cell_fields(docs_root, chunk, c["start_line"], c["end_line"], files))
    data["docs_root"] = str(docs_root.resolve()) if docs_root else None
    return data


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
    lines = citation.get("lines")
    if isinstance(lines, list) and lines:
        if not all(isinstance(line, dict) and isinstance(line.get("text", ""), str)
                   for line in lines):
            raise UsageError(f"citation {str(citation.get('label'))!r:.20}: `lines` must be "
                             "objects with a `text`")
        return "\n".join(line.get("text", "") for line in lines)
    ev = evidence.get(str(citation.get("label")))
    if ev is not None and isinstance(ev.get("text"), str) and _line_no(ev.get("start_line", 1)):
        text = ev["text"].split("\n")
        first = citation["start_line"] - int(ev.get("start_line", 1))
        return "\n".join(text[first:first + citation["end_line"] - citation["start_line"] + 1])
    raise UsageError(f"citation {str(citation.get('label'))!r:.20} has no recorded text to "
                     "check; save answers with `rag ask --json`")


def _line_no(value: Any) -> bool:
    """A line number as JSON may carry it: 12 or 12.0, from 1 to 10**9 (no NaN, no inf)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return (isinstance(value, int) or value.is_integer()) and 1 <= value <= 10**9


def _recorded_shape(c: dict[str, Any]) -> bool:
    """The cited text as the schema says: a `text` string and/or a non-empty `lines` list
    of objects whose `text`, where given, is a string."""
    text, lines = c.get("text"), c.get("lines")
    if text is None and lines is None:
        return False
    if text is not None and not isinstance(text, str):
        return False
    if lines is None:
        return True
    return isinstance(lines, list) and bool(lines) and all(
        isinstance(x, dict) and isinstance(x.get("text", ""), str) for x in lines)


def _citations(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every citation of a saved answer, once per (path, range); UsageError (one line, a
    4xx over HTTP) for anything that is not a saved answer's shape."""
    if not isinstance(data, dict) or not isinstance(data.get("citations"), list):
        raise UsageError("not a saved answer: no `citations` list (save one with `rag ask --json`)")
    statements = data.get("statements", [])
    if not isinstance(statements, list):
        raise UsageError("not a saved answer: `statements` is not a list")
    out = list(data["citations"])
    for statement in statements:
        if not isinstance(statement, dict):
            raise UsageError("not a saved answer: a statement is not an object")
        cited = statement.get("citations", [])
        if not isinstance(cited, list):  # null too: the schema says a list, so does the CLI
            raise UsageError("not a saved answer: a statement's `citations` is not a list")
        out.extend(cited)
    seen: dict[tuple[str, int, int], dict[str, Any]] = {}
    for c in out:
        path = c.get("source_path") if isinstance(c, dict) else None
        if not isinstance(path, str) or not path or any(ord(ch) < 32 for ch in path) \
                or not _line_no(c.get("start_line")) or not _line_no(c.get("end_line")):
            raise UsageError(f"citation {c!r:.60} lacks source_path, start_line or end_line "
                             "(a non-empty path and line numbers from 1)")
        if not _recorded_shape(c):
            raise UsageError(f"citation {c!r:.60} has no recorded `text` string or `lines` "
                             "list of objects")
        c = {**c, "start_line": int(c["start_line"]), "end_line": int(c["end_line"])}
        seen.setdefault((path, c["start_line"], c["end_line"]), c)
    return list(seen.values())


def recheck_answer(data: dict[str, Any], gate: DocsGate) -> list[Recheck]:
    """Check every citation of a saved answer (deduplicated by range) through ``gate``.

    A citation of a file the gate does not open (missing, not a Source, or one the caller
    may not see) is ``gone``: a restricted file looks exactly like a missing one.
    """
    evidence = {str(e.get("label")): e for e in data.get("evidence") or [] if isinstance(e, dict)}
    out: list[Recheck] = []
    for c in _citations(data):
        text = _recorded_text(c, evidence)
        found = gate.open(c["source_path"])
        status, start, end = locate(found.lines if found else None, c["start_line"],
                                    c["end_line"], text)
        moved = status == "moved"
        heading = c.get("heading") if isinstance(c.get("heading"), str) else None
        out.append(Recheck(str(c.get("label", "")), c["source_path"], c["start_line"],
                           c["end_line"], heading, status,
                           start if moved else None, end if moved else None))
    return out


def restricted_to(rel: str, chunks: Iterable[Any], manifest_groups: Iterable[str],
                  lines: list[str] | None, settings: Any) -> list[tuple[str, ...]]:
    """Every group set that restricts a file: from the index, the config, its front matter now.

    A caller may see the file only when they are in one group of each set (fail closed: the
    index and the file on disk may disagree until the next re-index).
    """
    from rag.indexer.indexing import visibility_for
    from rag.reader.chunking import parse_document
    from rag.reader.formats import reader_for, reader_of, visibility_of
    from rag.reader.visibility import NOBODY, UnclearVisibility, read_visibility

    own = [c for c in chunks if c.source_path == rel]
    sets = [tuple(c.visibility) for c in own if c.visibility]
    sets.append(visibility_for(rel, list(manifest_groups), settings))
    if lines is not None:
        text = "\n".join(lines)
        # Read as the indexer read it: the reader its chunks record, else by today's rule.
        reader = next((reader_of(c) for c in own if c.format), None) or reader_for(rel, text)
        try:
            front = read_visibility(text, parse_document(text)) if reader.name == "markdown" \
                else visibility_of(rel, lines, reader)
        except UnclearVisibility:
            front = NOBODY  # the indexer leaves such a file out: nobody may read it
        sets.append(visibility_for(rel, list(front), settings))
    return [s for s in sets if s]


def may_see(groups: frozenset[str], restrictions: list[tuple[str, ...]]) -> bool:
    return all(not groups.isdisjoint(s) for s in restrictions)


_CITATION_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["source_path", "start_line", "end_line"],
    "properties": {"source_path": {"type": "string", "minLength": 1,
                                   "pattern": "^[^\\u0000-\\u001f]+$"},
                   "start_line": {"type": "integer", "minimum": 1, "maximum": 10**9},
                   "end_line": {"type": "integer", "minimum": 1, "maximum": 10**9},
                   "text": {"type": "string"},
                   "lines": {"type": "array", "minItems": 1, "items": {
                       "type": "object", "properties": {"text": {"type": "string"}}}}},
    "anyOf": [{"required": ["text"]}, {"required": ["lines"]}]}
_SAVED_ANSWER_SCHEMA: dict[str, Any] = {
    "required": ["citations"],
    "properties": {
        "citations": {"type": "array", "items": _CITATION_SCHEMA},
        "statements": {"type": "array", "items": {"type": "object", "properties": {
            "citations": {"type": "array", "items": _CITATION_SCHEMA}}}}},
}


def citation_count(data: dict[str, Any]) -> int:
    """How many citations a saved answer names: its `citations` and every statement's."""
    lists = [data.get("citations")]
    statements = data.get("statements")
    if isinstance(statements, list):
        lists += [s.get("citations") for s in statements if isinstance(s, dict)]
    return sum(len(cited) for cited in lists if isinstance(cited, list))


def check_citation_cap(data: dict[str, Any], cap: int) -> None:
    """UsageError (422) for an answer naming more than ``cap`` citations: each one costs a
    file check, so the work one request may ask for is bounded before any is done."""
    if (count := citation_count(data)) > cap:
        raise UsageError(f"the answer names {count} citations; POST /verify checks at most "
                         f"{cap} ([server] max_verify_citations)")


def cap_citations_in_schema(openapi: dict[str, Any], cap: int) -> None:
    """Write this server's citation cap into its OpenAPI schema (maxItems, and the combined
    rule in words): the model is shared by every server, the configured cap is not."""
    answer = openapi["components"]["schemas"]["VerifyRequest"]["properties"]["answer"]
    answer["properties"]["citations"]["maxItems"] = cap
    answer["properties"]["statements"]["items"]["properties"]["citations"]["maxItems"] = cap
    answer["description"] += f" At most {cap} citations in all (`citations` and every " \
        "statement's together)."


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
    check_citation_cap(request.answer, settings.server.max_verify_citations)
    groups = frozenset(g.strip() for g in request.groups if g.strip())

    from rag.stores import sources_for

    found = sources_for(version, groups)

    def allowed(rel: str, lines: list[str] | None) -> bool:
        entry = found.files.get(rel)
        front = entry.visibility if entry is not None else []
        return may_see(groups, restricted_to(rel, found.chunks, front, lines, settings))

    gate = DocsGate(docs, settings.docs.max_file_bytes, found.files, allowed,
                    tuple(settings.docs.extensions))
    checks = recheck_answer(request.answer, gate)
    return {"all_exact": all(c.status == "exact" for c in checks),
            "citations": [c.to_dict() for c in checks]}


def _docs_and_sources(data: Any, docs: Path | None, index: Path,
                      settings: Any) -> tuple[Path, Any]:
    """The folder `rag verify` reads, and the Sources it may open there (None: any docs file).

    ``--docs`` first; then the folder the answer names, but only where this user's cache
    holds an index of it (`rag ask --docs` built one), since otherwise it is just a string in
    a file; then the folder ``index`` was built from; then ``docs.root``.
    """
    from rag.indexer.folders import cache_index_for, docs_of_index
    from rag.stores import folder as store

    def built_from(folder: Path, at: Path) -> Any:
        manifest = store.read_manifest(at) if at.is_dir() else None
        ok = manifest is not None and manifest.docs_root and \
            Path(manifest.docs_root).resolve() == folder.resolve()
        return manifest if ok else None

    saved = data.get("docs_root") if isinstance(data, dict) else None
    if docs is None and isinstance(saved, str) and saved and "\x00" not in saved:
        manifest = built_from(Path(saved), cache_index_for(Path(saved), settings))
        if manifest is not None:
            return Path(saved), manifest.files
    if docs is None:
        docs = docs_of_index(index) if index.is_dir() else None
        docs = docs or Path(settings.docs.root)
    manifest = built_from(docs, index)
    return docs, manifest.files if manifest is not None else None


def load_answer_file(path: Path, settings: Any) -> dict[str, Any]:
    """A saved answer (`rag ask --json`), read under ``docs.max_file_bytes``."""
    import json

    from rag.reader.walker import read_text

    if not path.is_file():
        raise RagError(f"{path}: no such file")
    text, _, problem = read_text(path, str(path), settings.docs.max_file_bytes)
    try:
        data = json.loads(text) if text is not None else None
    except ValueError as exc:
        raise RagError(f"{path}: not a readable JSON answer ({exc})") from None
    if data is None:  # read_text's reason reads "skipped <path>: why"
        why = (problem or "unreadable").split(": ", 1)[-1]
        raise RagError(f"{path}: not a readable JSON answer ({why})")
    return data


def recheck(data: Any, docs: Path | None, index: Path,
            settings: Any) -> tuple[Path, list[Recheck]]:
    """The folder read (see ``_docs_and_sources``) and each citation's check against it."""
    docs, sources = _docs_and_sources(data, docs, index, settings)
    gate = DocsGate(docs, settings.docs.max_file_bytes, sources, None,
                    tuple(settings.docs.extensions))
    return docs, recheck_answer(data, gate)


def verify_file(path: Path, docs: Path | None, index: Path, settings: Any, *, json_out: bool,
                echo: Callable[[str], None]) -> int:
    """`rag verify`: print one line per citation (or JSON); 0 when all are exact, else 8."""
    from rag.core.terminal import json_line, one_line

    docs, checks = recheck(load_answer_file(path, settings), docs, index, settings)
    exact = all(c.status == "exact" for c in checks)
    if json_out:
        echo(json_line({"docs_root": str(docs), "all_exact": exact,
                        "citations": [c.to_dict() for c in checks]}))
    elif not checks:
        echo("no citations to check")
    else:
        for c in checks:
            echo(one_line(c.line()))
    return 0 if exact else EXIT_NOT_EXACT
