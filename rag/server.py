"""HTTP API and web page (`rag serve`): ask, search, re-index and health, plus one page at `/`.

One loaded index version and one generator serve every request. A re-index builds a complete
new Pipeline in a worker thread, then swaps a single reference; each request reads that
reference once, so it sees the old index or the new one, never a mix, and requests already
running keep the object they started with.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException

from rag import errors
from rag.config import Settings
from rag.embedding import Embedder
from rag.pipeline import Pipeline
from rag.records import Answer
from rag.verification import cited_text, quote_lines

log = logging.getLogger("rag.server")
WEB = Path(__file__).parent / "web"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
Mode = Literal["dense", "lexical", "hybrid"]
# Documents are untrusted: even if some text slipped into markup, no script could load or run.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
BUSY = "a re-index is already running; try again when it has finished"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not ignored


class AskRequest(_Request):
    question: str = Field(..., max_length=4000, description="The question, in plain words.")
    groups: list[str] = Field(default_factory=list, description="Groups of the asking user.")
    mode: Mode | None = Field(None, description="Search mode; default from config.")

    @field_validator("question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()


class IndexRequest(_Request):
    rebuild: bool = Field(False, description="Re-embed everything instead of only changes.")


class Line(BaseModel):
    number: int
    text: str


class CitationOut(BaseModel):
    label: str
    source_path: str
    chunk_id: str
    start_line: int
    end_line: int
    heading: str | None
    lines: list[Line] = Field(description="The cited lines as the docs file has them now.")
    lines_note: str | None = Field(None, description="Why `lines` is empty, if it is.")


class StatementOut(BaseModel):
    text: str
    citations: list[CitationOut]
    supported: bool
    support_score: float


class HitOut(BaseModel):
    chunk_id: str
    source_id: str
    source_path: str
    text: str
    start_line: int
    end_line: int
    heading: str | None
    visibility: list[str]
    score: float
    rank: int


class EvidenceOut(HitOut):
    label: str


class ExcludedOut(BaseModel):
    chunk_id: str
    reason: str
    source_path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    heading: str | None = None


class AnswerOut(BaseModel):
    question: str
    answer: str
    statements: list[StatementOut]
    citations: list[CitationOut]
    insufficient_evidence: bool
    evidence: list[EvidenceOut]
    excluded: list[ExcludedOut]
    generator: str
    extractive_fallback: bool
    unsupported: list[StatementOut]
    timings: dict[str, float]
    tokens: dict[str, int]
    label_checks: dict[str, int]
    index_version: str


class SearchOut(BaseModel):
    query: str
    version: str
    hits: list[HitOut]


class HealthOut(BaseModel):
    status: str
    chunks: int
    version: str


class IndexOut(BaseModel):
    version: str
    chunks: int
    summary: str
    report: dict[str, Any]


class ErrorOut(BaseModel):
    error: str


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut} for code in (400, 403, 409, 422, 500, 503)
}


def answer_payload(answer: Answer, docs: Path, version: str) -> dict[str, Any]:
    """Answer.to_dict() plus the cited lines, where excluded evidence came from, the version."""
    data = answer.to_dict()
    indexed = {e.chunk.chunk_id: e.chunk for e in answer.evidence}
    files: dict[str, list[str] | None] = {}

    def with_lines(citation: dict[str, Any]) -> dict[str, Any]:
        chunk = indexed.get(citation["chunk_id"])
        start, end = citation["start_line"], citation["end_line"]
        expected = cited_text(chunk, start, end) if chunk is not None else ""
        lines, note = quote_lines(docs, citation["source_path"], start, end, expected, files)
        return {**citation, "lines": [{"number": n, "text": t} for n, t in lines],
                "lines_note": note}

    data["citations"] = [with_lines(c) for c in data["citations"]]
    for key in ("statements", "unsupported"):
        for statement in data[key]:
            statement["citations"] = [with_lines(c) for c in statement["citations"]]
    hits = {h.chunk.chunk_id: h.chunk for h in answer.hits}
    for item in data["excluded"]:
        chunk = hits.get(item["chunk_id"])
        if chunk is not None and item["reason"] != "not_visible":  # never reveal hidden paths
            item.update(source_path=chunk.source_path, start_line=chunk.start_line,
                        end_line=chunk.end_line, heading=chunk.heading)
    data["index_version"] = version
    return data


class SharedGenerator:
    """The generator every index version uses, so a model server starts once per process."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.name = name
        self._lock = threading.Lock()
        self._generator: object | None = None

    def get(self) -> object:
        # Built under a lock: two first questions at once must not start two model servers.
        with self._lock:
            if self._generator is None:
                from rag.generation import make_generator

                self._generator = make_generator(self.settings, self.name)
            return self._generator

    def close(self) -> None:
        with self._lock:
            close = getattr(self._generator, "close", None)
            self._generator = None
        if close is not None:
            close()


class ServedPipeline(Pipeline):
    """A Pipeline over one index version whose generator is shared with every other version."""

    def __init__(self, index_root: Path, settings: Settings, shared: SharedGenerator,
                 retriever: Any) -> None:
        super().__init__(index_root, settings, generator=shared.name, retriever=retriever)
        self.shared = shared

    def generator(self) -> object:
        return self.shared.get()

    def close(self) -> None:
        """Nothing to close: the shared generator outlives this index version."""

    @property
    def version(self) -> str:
        return str(self.retriever.index.path.name)


class ServerState:
    """What the app holds: settings, the embedder, and the live pipeline reference."""

    def __init__(self, index: Path, settings: Settings, docs: Path, generator: str | None,
                 embedder: Embedder | None) -> None:
        from rag.embedding import make_embedder

        self.index_root = index
        self.settings = settings
        self.docs = docs
        self.embedder = embedder or make_embedder(
            settings.embedding, threads=settings.embedding.query_threads)
        self.shared = SharedGenerator(settings, generator or settings.generation.generator)
        self.reindex_lock = threading.Lock()
        self.pipeline = self.load()

    def load(self) -> ServedPipeline:
        """Load the live version completely (BM25 included) before anyone can see it."""
        from rag import store
        from rag.retrieval import Retriever

        version = store.load(self.index_root)
        _ = version.lexical  # the files of an old version may be collected later
        retriever = Retriever(version, self.embedder, self.settings.retrieval,
                              self.settings.index)
        return ServedPipeline(self.index_root, self.settings, self.shared, retriever)

    def reindex(self, rebuild: bool) -> tuple[Any, ServedPipeline]:
        """Bring the index up to date, then swap in a new pipeline (one reference write)."""
        from rag import indexing

        report = indexing.build_index(self.docs, self.index_root, self.settings, self.embedder,
                                      rebuild=rebuild)
        pipeline = self.load()
        self.pipeline = pipeline
        return report, pipeline


def status_for(exc: errors.RagError) -> int:
    """HTTP status of a domain error: bad input 400, model endpoint 503, the rest 500."""
    if isinstance(exc, errors.GenerationError):
        return 503
    if isinstance(exc, errors.AccessError):
        return 403
    if isinstance(exc, errors.ConfigError | errors.RetrievalError):
        return 400
    if isinstance(exc, errors.IndexBusyError):
        return 409
    return 500


def _validation_message(exc: RequestValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query"))
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.RagError)
    async def rag_error(_: Request, exc: errors.RagError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=status_for(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _validation_message(exc)}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error: %r", exc, exc_info=exc)  # the log has it, the client not
        return JSONResponse({"error": "internal error; the server log has the details"},
                            status_code=500)


def _groups(value: str) -> list[str]:
    return [g.strip() for g in value.split(",") if g.strip()]


def create_app(*, index: Path, settings: Settings, docs: Path, generator: str | None = None,
               embedder: Embedder | None = None) -> FastAPI:
    """The app over the index at ``index``; ``embedder`` replaces the configured one (tests)."""
    state = ServerState(index, settings, docs, generator, embedder)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # Built here, on the thread that runs the app: a local model server is tied to the
        # life of the thread that started it, and worker threads come and go.
        state.shared.get()
        try:
            yield
        finally:
            state.shared.close()

    app = FastAPI(title="rag", summary="Docs question answering with verified citations",
                  lifespan=lifespan, docs_url=None, redoc_url=None)  # their pages use a CDN
    app.state.rag = state
    _install_error_handlers(app)

    @app.middleware("http")
    async def security_headers(request: Request, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.get("/health", response_model=HealthOut)
    def health() -> dict[str, Any]:
        pipeline = state.pipeline
        return {"status": "ok", "chunks": len(pipeline.retriever.index.chunks),
                "version": pipeline.version}

    @app.get("/search", response_model=SearchOut, responses=ERRORS)
    def search(
        q: Annotated[str, Query(max_length=4000, description="The query.")],
        k: Annotated[int | None, Query(ge=1, le=1000, description="Hits to return.")] = None,
        mode: Annotated[Mode | None, Query(description="dense, lexical or hybrid.")] = None,
        groups: Annotated[str, Query(description="Comma-separated groups of the asker.")] = "",
    ) -> dict[str, Any]:
        pipeline = state.pipeline  # read once: this request stays on this version
        hits = pipeline.retriever.search(q, k=k, mode=mode, groups=_groups(groups))
        return {"query": q, "version": pipeline.version, "hits": [h.to_dict() for h in hits]}

    @app.post("/ask", response_model=AnswerOut, responses=ERRORS)
    def ask(request: AskRequest) -> dict[str, Any]:
        pipeline = state.pipeline
        groups = [g.strip() for g in request.groups if g.strip()]
        answer = pipeline.ask(request.question, mode=request.mode, groups=groups)
        return answer_payload(answer, state.docs, pipeline.version)

    @app.post("/index", response_model=IndexOut, responses=ERRORS)
    async def reindex(request: IndexRequest | None = None) -> Any:
        if not state.reindex_lock.acquire(blocking=False):
            return JSONResponse({"error": BUSY}, status_code=409)
        try:  # in a worker thread, so /search and /ask keep answering meanwhile
            report, pipeline = await run_in_threadpool(
                state.reindex, bool(request and request.rebuild))
        finally:
            state.reindex_lock.release()
        return {"version": pipeline.version, "chunks": len(pipeline.retriever.index.chunks),
                "summary": report.summary(), "report": report.to_dict()}

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(WEB / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=WEB), name="static")
    return app


def serve(*, index: Path, settings: Settings, docs: Path, host: str, port: int,
          generator: str | None) -> None:
    """`rag serve`: load the index and the generator once, then serve until Ctrl-C."""
    import uvicorn

    app = create_app(index=index, settings=settings, docs=docs, generator=generator)
    # Start the model now, on the main thread (uvicorn's too): errors surface as one line.
    app.state.rag.shared.get()
    built_from = app.state.rag.pipeline.retriever.index.manifest.docs_root
    if built_from and Path(built_from) != docs.resolve():
        print(f"warning: the index was built from {built_from}, but cited lines are read from "
              f"{docs} and POST /index re-indexes {docs}", file=sys.stderr)
    if host not in LOOPBACK:
        print(f"warning: listening on {host}: anyone who can reach it can claim any groups",
              file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {docs} (index {index}) on http://{shown}:{port}/ (Ctrl-C stops)",
          file=sys.stderr)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: a normal stop
        print("stopped", file=sys.stderr)
    finally:
        app.state.rag.shared.close()  # also when startup failed and lifespan never closed it
