"""HTTP API and web page (`rag serve`): ask, search, check, verify, re-index and health, plus one
page at `/`.

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
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse
from fastapi.security import HTTPBearer
from fastapi.staticfiles import StaticFiles

from rag.core.config import Settings
from rag.generator.base import Generator
from rag.indexer.embedding import Embedder
from rag.interfaces.http.api import (
    ERRORS,
    NOT_BLANK,
    POST_ERRORS,
    AnswerOut,
    AskRequest,
    CheckOut,
    CheckRequest,
    HealthOut,
    IndexOut,
    IndexRequest,
    Mode,
    SearchOut,
    answer_payload,
)
from rag.interfaces.http.auth import Authenticator, HostCheck, Identity, Unauthorized
from rag.interfaces.http.bodylimit import BodyLimit
from rag.interfaces.http.failures import error_response, install_error_handlers, status_for
from rag.interfaces.http.streaming import STREAMED, stream_answer, wants_stream
from rag.pipeline import Pipeline
from rag.stores import is_stale
from rag.verifier.check import check_text
from rag.verifier.reverify import VerifyOut, VerifyRequest, cap_citations_in_schema, verify_payload

log = logging.getLogger("rag.server")
WEB = Path(__file__).parent / "web"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
BEARER = HTTPBearer(auto_error=False, description="An API token from `rag token add`.")
# Documents are untrusted: even if some text slipped into markup, no script could load or run.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
BUSY = "a re-index is already running; try again when it has finished"


class SharedGenerator:
    """The generator every index version uses, so a model server starts once per process."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.settings = settings
        self.name = name
        self._lock = threading.Lock()
        self._generator: Generator | None = None

    def get(self) -> Generator:
        # Built under a lock: two first questions at once must not start two model servers.
        with self._lock:
            if self._generator is None:
                from rag.generator.backends import make_generator

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

    def generator(self) -> Generator:
        return self.shared.get()

    def close(self) -> None:
        """Nothing to close: the shared generator outlives this index version."""

    @property
    def version(self) -> str:
        return str(self.retriever.index.path.name)


class ServerState:
    """What the app holds: settings, the embedder, and the live pipeline reference."""

    _pipeline: ServedPipeline

    def __init__(self, index: Path, settings: Settings, docs: Path, generator: str | None,
                 embedder: Embedder | None) -> None:
        from rag.indexer.embedding import make_embedder

        self.index_root = index
        self.settings = settings
        self.docs = docs
        self.embedder = embedder or make_embedder(
            settings.embedding, threads=settings.embedding.query_threads)
        self.shared = SharedGenerator(settings, generator or settings.generation.generator)
        self.reindex_lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self.pipeline = self.load()

    @property
    def pipeline(self) -> ServedPipeline:
        """The live pipeline; reloaded once another process made a shared index newer."""
        pipeline = self._pipeline
        if is_stale(pipeline.retriever.index):
            with self._reload_lock:
                if self._pipeline is pipeline:
                    self._pipeline = self.load()
        return self._pipeline

    @pipeline.setter
    def pipeline(self, pipeline: ServedPipeline) -> None:
        self._pipeline = pipeline

    def load(self) -> ServedPipeline:
        """Load the live version completely (BM25 included) before anyone can see it."""
        from rag.retriever.retrieval import Retriever
        from rag.stores import open_index

        version = open_index(self.index_root, self.settings)
        _ = version.lexical  # the files of an old version may be collected later
        retriever = Retriever(version, self.embedder, self.settings.retrieval,
                              self.settings.index)
        return ServedPipeline(self.index_root, self.settings, self.shared, retriever)

    def reindex(self, rebuild: bool) -> tuple[Any, ServedPipeline]:
        """Bring the index up to date, then swap in a new pipeline (one reference write)."""
        from rag.indexer import indexing

        report = indexing.build_index(self.docs, self.index_root, self.settings, self.embedder,
                                      rebuild=rebuild)
        pipeline = self.load()
        self.pipeline = pipeline
        return report, pipeline


def refusal(request: Request, hosts: HostCheck, auth: Authenticator) -> JSONResponse | None:
    """The answer to a request refused before any endpoint sees it; None lets it through.

    Sets ``request.state.identity`` for the requests it lets through.
    """
    host = request.headers.get("host", "")
    if not hosts.allows(host):
        return error_response(421, f"this server does not answer to Host {host[:100]!r}; "
                           "add the name to [server] allowed_hosts")
    if request.method not in SAFE_METHODS:
        origin = request.headers.get("origin")
        if origin is not None and not hosts.allows_origin(origin):
            return error_response(403, "cross-origin request refused")
        ctype = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if ctype != "application/json":
            return error_response(415, f"{request.method} needs a JSON body "
                               "(Content-Type: application/json)")
    try:
        request.state.identity = auth.identify(
            request.headers, request.client.host if request.client else None)
    except Unauthorized as exc:
        return error_response(401, str(exc), headers={"WWW-Authenticate": 'Bearer realm="rag"'})
    return None


def create_app(*, index: Path, settings: Settings, docs: Path, generator: str | None = None,
               embedder: Embedder | None = None, trust_claimed_groups: bool = False,
               port: int | None = None, listen_host: str | None = None) -> FastAPI:
    """The app over the index at ``index``; ``embedder`` replaces the configured one (tests).

    ``trust_claimed_groups`` believes the groups a request names (development only);
    ``port`` and ``listen_host`` complete the default Host allow-list.
    """
    auth = Authenticator(settings.server)  # a damaged tokens file stops it here
    hosts = HostCheck(settings.server.allowed_hosts, port, listen_host)
    state = ServerState(index, settings, docs, generator, embedder)

    def groups_of(request: Request, claimed: list[str]) -> list[str]:
        """The asker's groups: their credentials', or what they claim in development."""
        identity: Identity = request.state.identity
        if identity.user is None and trust_claimed_groups:
            return [g.strip() for g in claimed if g.strip()]
        return sorted(identity.groups)

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
    install_error_handlers(app)
    # Inside the guard: Host, origin, content type and credentials are checked first, then
    # the body is counted before any endpoint parses it.
    app.add_middleware(BodyLimit, max_bytes=settings.server.max_body_bytes)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Any:
        response = refusal(request, hosts, auth) or await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.get("/health", response_model=HealthOut, responses=ERRORS)
    def health(request: Request) -> dict[str, Any]:
        pipeline = state.pipeline
        groups = frozenset(groups_of(request, []))
        # Only the chunks this asker may see: the total would tell anyone how much is hidden.
        index = pipeline.retriever.index
        count = getattr(index, "visible_count", None)  # a database counts for itself
        visible = count(groups) if count is not None else sum(
            1 for c in index.chunks if not c.visibility or not groups.isdisjoint(c.visibility))
        return {"status": "ok", "chunks": visible,
                "version": pipeline.version, "user": request.state.identity.user,
                "tokens": auth.accepts_tokens, "claimed_groups": trust_claimed_groups}

    @app.get("/search", response_model=SearchOut, responses=ERRORS)
    def search(
        request: Request,
        q: Annotated[str, Query(min_length=1, max_length=4000, pattern=NOT_BLANK,
                                description="The query.")],
        k: Annotated[int | None, Query(ge=1, le=1000, description="Hits to return.")] = None,
        mode: Annotated[Mode | None, Query(description="dense, lexical or hybrid.")] = None,
        groups: Annotated[str, Query(
            max_length=4000, description="Comma-separated groups; ignored unless the server "
            "runs with --dev-trust-claimed-groups.")] = "",
    ) -> dict[str, Any]:
        pipeline = state.pipeline  # read once: this request stays on this version
        hits = pipeline.retriever.search(q, k=k, mode=mode,
                                         groups=groups_of(request, groups.split(",")))
        return {"query": q, "version": pipeline.version, "hits": [h.to_dict() for h in hits]}

    @app.post("/ask", response_model=AnswerOut, responses={**POST_ERRORS, 200: STREAMED})
    def ask(request: Request, body: AskRequest) -> Any:
        """The verified answer; with `Accept: text/event-stream`, each stage as it happens."""
        pipeline = state.pipeline
        if wants_stream(request.headers.get("accept", "")):
            return stream_answer(pipeline, question=body.question, mode=body.mode,
                                 groups=groups_of(request, body.groups), docs=state.docs,
                                 version=pipeline.version, status_for=status_for)
        answer = pipeline.ask(body.question, mode=body.mode,
                              groups=groups_of(request, body.groups))
        return answer_payload(answer, state.docs, pipeline.version)

    @app.post("/index", response_model=IndexOut, responses=POST_ERRORS)
    async def reindex(request: Request, body: IndexRequest,
                      _: Annotated[Any, Security(BEARER)] = None) -> Any:
        if request.state.identity.user is None:  # writes need someone to answer for them
            return error_response(401, "POST /index needs an API token",
                          headers={"WWW-Authenticate": 'Bearer realm="rag"'})
        if not state.reindex_lock.acquire(blocking=False):
            return error_response(409, BUSY)
        try:  # in a worker thread, so /search and /ask keep answering meanwhile
            report, pipeline = await run_in_threadpool(state.reindex, body.rebuild)
        finally:
            state.reindex_lock.release()
        return {"version": pipeline.version, "chunks": len(pipeline.retriever.index.chunks),
                "summary": report.summary(), "report": report.to_dict()}

    @app.post("/verify", response_model=VerifyOut, responses=POST_ERRORS)
    def verify(request: Request, body: VerifyRequest) -> dict[str, Any]:
        """Re-check a saved answer's citations against the docs now (see `rag verify`)."""
        body = body.model_copy(update={"groups": groups_of(request, body.groups)})
        pipeline = state.pipeline
        return verify_payload(body, state.docs, pipeline.retriever.index, state.settings)

    @app.post("/check", response_model=CheckOut, responses=POST_ERRORS)
    def check(request: Request, body: CheckRequest) -> dict[str, Any]:
        """Check each sentence of a text against the docs the caller may see (`rag check`)."""
        pipeline = state.pipeline
        checks = check_text(body.text, pipeline.retriever, state.docs, mode=body.mode,
                            groups=groups_of(request, body.groups),
                            threshold=settings.verification.check_threshold,
                            max_sentences=settings.server.max_check_sentences)
        return {"all_supported": bool(checks) and all(c.status == "supported" for c in checks),
                "sentences": [c.to_dict() for c in checks], "version": pipeline.version}

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(WEB / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=WEB), name="static")
    cap_citations_in_schema(app.openapi(), settings.server.max_verify_citations)
    return app


def serve(*, index: Path, settings: Settings, docs: Path, host: str, port: int,
          generator: str | None, watch: bool = False,
          trust_claimed_groups: bool = False) -> None:
    """`rag serve`: load the index and the generator once, then serve until Ctrl-C."""
    import uvicorn

    app = create_app(index=index, settings=settings, docs=docs, generator=generator,
                     trust_claimed_groups=trust_claimed_groups, port=port, listen_host=host)
    # Start the model now, on the main thread (uvicorn's too): errors surface as one line.
    app.state.rag.shared.get()
    built_from = app.state.rag.pipeline.retriever.index.manifest.docs_root
    if built_from and Path(built_from) != docs.resolve():
        print(f"warning: the index was built from {built_from}, but cited lines are read from "
              f"{docs} and POST /index re-indexes {docs}", file=sys.stderr)
    if trust_claimed_groups:
        print("warning: --dev-trust-claimed-groups: any request may name any groups and read "
              "their docs; use it only for development", file=sys.stderr)
    if host not in LOOPBACK and not settings.server.allowed_hosts:
        print(f"warning: listening on {host}, but only Host headers naming 127.0.0.1, "
              f"localhost, [::1] or {host} are answered; list the names clients use in "
              "[server] allowed_hosts", file=sys.stderr)
    if not settings.server.tokens_file and not settings.server.trusted_proxies:
        print("note: no [server] tokens_file or trusted_proxies: every request sees public "
              "docs only, and POST /index is refused", file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {docs} (index {index}) on http://{shown}:{port}/ (Ctrl-C stops)",
          file=sys.stderr)
    stop_watching = None
    if watch:
        from rag.interfaces.watch import watch_server

        stop_watching = watch_server(app.state.rag)
    try:
        # proxy_headers off: X-Forwarded-For must never stand in for the peer address that
        # [server] trusted_proxies is checked against.
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                    proxy_headers=False)
    except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it handled: a normal stop
        print("stopped", file=sys.stderr)
    finally:
        if stop_watching is not None:
            stop_watching()
        app.state.rag.shared.close()  # also when startup failed and lifespan never closed it
