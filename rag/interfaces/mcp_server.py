"""`rag mcp`: the docs as Model Context Protocol tools, over stdio.

Tools: ``search_docs``, ``ask_docs`` (the verified answer with its citations),
``check_claims`` (each sentence of a text: supported, conflicting or not_found, with the
docs' lines), ``read_lines`` (a cited range, as the file has it now) and ``list_sources``. The groups the server acts for
come from its command line (``--groups``), never from a tool call: a client cannot claim a
group, and a restricted file is neither listed, searched, cited nor readable without one.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import Field

from rag.core.config import Settings
from rag.core.errors import RagError
from rag.pipeline import Pipeline
from rag.reader.docfiles import DocsGate
from rag.stores import sources_for
from rag.stores.folder import Sources
from rag.verifier.reverify import answer_json, may_see, restricted_to

MAX_READ_LINES = 400  # lines one read_lines call returns at most
INSTRUCTIONS = (
    "Answers questions about one docs folder (Markdown, reStructuredText, notebooks, HTML, "
    "text). Prefer ask_docs: every citation it returns was checked in code against the docs. "
    "Use read_lines to see more around a citation, search_docs for raw passages, list_sources "
    "for what the docs hold. Before stating something about these docs in your own words, "
    "check_claims tells you which sentences the docs support."
)
F = TypeVar("F", bound=Callable[..., Any])


def _tool_errors(func: F) -> F:
    """A domain error becomes the tool's error message (one line), not a crash."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except RagError as exc:
            raise ToolError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


class DocsTools:
    """The five tools over one loaded index; one request at a time uses the pipeline."""

    def __init__(self, pipeline: Pipeline, docs: Path, settings: Settings,
                 groups: frozenset[str]) -> None:
        self.pipeline = pipeline
        self.docs = docs
        self.settings = settings
        self.groups = groups
        self.lock = threading.Lock()

    def sources(self) -> Sources:
        """The indexed files and chunks these groups may be shown (rag.stores.Sources)."""
        return sources_for(self.pipeline.retriever.index, self.groups)

    def _visible(self, found: Sources, rel: str, lines: list[str] | None) -> bool:
        entry = found.files.get(rel)
        if entry is None:
            return False
        return may_see(self.groups, restricted_to(rel, found.chunks, entry.visibility,
                                                  lines, self.settings))

    def search_docs(
        self,
        query: Annotated[str, Field(description="What to look for, in plain words.")],
        k: Annotated[int, Field(ge=1, le=50, description="How many passages.")] = 5,
    ) -> dict[str, Any]:
        """Search the docs: the best-matching passages with file, line range and heading."""
        with self.lock:
            hits = self.pipeline.retriever.search(query, k=k, groups=self.groups)
        return {"hits": [{"source_path": h.chunk.source_path, "start_line": h.chunk.start_line,
                          "end_line": h.chunk.end_line, "heading": h.chunk.heading,
                          "score": round(h.score, 6), "text": h.chunk.text} for h in hits]}

    def ask_docs(
        self, question: Annotated[str, Field(description="The question, in plain words.")],
    ) -> dict[str, Any]:
        """Answer from the docs. Every citation (file, lines, heading, cited text) was verified
        in code; `insufficient_evidence` is true when the docs do not answer the question."""
        if not question.strip():
            raise RagError("the question is empty")
        with self.lock:
            answer = self.pipeline.ask(question, groups=self.groups)
        data = answer_json(answer, self.docs)
        keep = ("label", "source_path", "start_line", "end_line", "heading", "text", "cell",
                "cell_lines", "end_cell")  # the last three for a notebook only
        return {
            "answer": data["answer"],
            "insufficient_evidence": data["insufficient_evidence"],
            "extractive_fallback": data["extractive_fallback"],
            "statements": [{"text": s["text"], "citations": [c["label"] for c in s["citations"]]}
                           for s in data["statements"]],
            "citations": [{k: c[k] for k in keep if k in c} for c in data["citations"]],
            "closest_evidence": [
                {"source_path": e.chunk.source_path, "start_line": e.chunk.start_line,
                 "end_line": e.chunk.end_line, "heading": e.chunk.heading}
                for e in answer.evidence[:3]] if answer.insufficient_evidence else [],
        }

    def check_claims(
        self, text: Annotated[str, Field(description="Sentences to check against the docs: "
                                         "a draft answer, a README, a reply.")],
    ) -> dict[str, Any]:
        """Check each sentence of a text against the docs: `supported` (with the lines that
        back it), `conflicting` (the closest lines state another number, version, identifier
        or the opposite; both given) or `not_found`, each with its reason."""
        from rag.verifier.check import check_text

        if not text.strip():
            raise RagError("the text is empty")
        with self.lock:
            checks = check_text(text, self.pipeline.retriever, self.docs, groups=self.groups,
                                threshold=self.settings.verification.check_threshold,
                                max_sentences=self.settings.server.max_check_sentences)
        return {"all_supported": bool(checks) and all(c.status == "supported" for c in checks),
                "sentences": [c.to_dict() for c in checks]}

    def read_lines(
        self,
        path: Annotated[str, Field(description="Source path as cited, relative to the docs.")],
        start_line: Annotated[int, Field(ge=1, description="First line, 1-based.")],
        end_line: Annotated[int, Field(ge=1, description="Last line, inclusive.")],
    ) -> dict[str, Any]:
        """The lines of one docs file as it is now (e.g. around a citation), numbered."""
        if end_line < start_line:
            raise RagError(f"end_line {end_line} is before start_line {start_line}")
        if end_line - start_line + 1 > MAX_READ_LINES:
            raise RagError(f"at most {MAX_READ_LINES} lines per call")
        unknown = RagError(f"no source {path!r} in the docs you may see (list_sources has them)")
        # One gate and one answer for missing, not indexed and restricted: a caller without
        # the group must not learn that a restricted file exists.
        sources = self.sources()  # one listing for the whole call
        files = sources.files
        found = DocsGate(self.docs, self.settings.docs.max_file_bytes, files,
                         functools.partial(self._visible, sources),
                         tuple(self.settings.docs.extensions)).open(path)
        if found is None:
            raise unknown
        rel, lines = found.rel, found.lines
        if start_line > len(lines):
            raise RagError(f"{rel} has {len(lines)} lines; start_line {start_line} is past its end")
        end = min(end_line, len(lines))
        changed = hashlib.sha256(found.raw).hexdigest() != files[rel].content_hash
        return {"source_path": rel, "start_line": start_line, "end_line": end,
                "total_lines": len(lines), "changed_since_indexed": changed,
                "lines": [{"number": n, "text": lines[n - 1]}
                          for n in range(start_line, end + 1)]}

    def list_sources(self) -> dict[str, Any]:
        """The docs files you may see, each with its title (first heading) and chunk count."""
        found = self.sources()
        chunks: dict[str, list[Any]] = {}
        for c in found.chunks:
            chunks.setdefault(c.source_path, []).append(c)
        out = []
        for rel in sorted(found.files):
            if not self._visible(found, rel, None):
                continue
            mine = chunks.get(rel, [])
            title = next((c.heading.split(" > ")[0] for c in mine if c.heading), None)
            count = len(mine) if found.counts is None else found.counts.get(rel, 0)
            out.append({"source_path": rel, "title": title, "chunks": count})
        return {"docs_root": str(self.docs), "sources": out}


def build_server(tools: DocsTools) -> Any:
    """The MCP server object with the five tools registered."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name="rag", instructions=INSTRUCTIONS, log_level="WARNING")
    for method in (tools.ask_docs, tools.search_docs, tools.check_claims, tools.read_lines,
                   tools.list_sources):
        server.add_tool(_tool_errors(method), name=method.__name__)
    return server


def run_mcp(index: Path, docs: Path, settings: Settings, *, generator: str | None,
            groups: frozenset[str]) -> None:
    """`rag mcp`: load the index once, then serve over stdin/stdout until the client leaves."""
    with Pipeline(index, settings, generator=generator) as pipeline:
        # Started here, on the main thread, as `rag serve` does: a local model server then
        # dies with this process, and a broken model setup is one line before serving.
        pipeline.generator()
        build_server(DocsTools(pipeline, docs, settings, groups)).run("stdio")
