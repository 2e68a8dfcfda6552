"""`POST /ask` as Server-Sent Events: each pipeline stage's result as soon as it is ready.

Events, in order: ``hits`` (the search hits the asker may see), ``evidence`` (the passages
chosen for the model), one ``statement`` per verified statement (with its cited lines), then
``done`` (the same JSON as the plain response) or ``error`` (``{"error", "status"}``, the
status the plain request would have had). Every event's data is one line of JSON.

The pipeline runs on a worker of the pool plain /ask runs in, so one bound (anyio's default
thread limiter) covers both kinds of request, and hands each stage to the event loop. Once the
client has gone, a stream still waiting for a worker never starts, and a running one stops at
the next stage it reaches, at the latest just before the model call (a model request already
in flight finishes: a thread cannot be stopped).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from rag.core import errors
from rag.core.records import Evidence, SearchHit, Statement
from rag.interfaces.http.api import AnswerOut, EvidenceOut, HitOut, StatementOut, answer_payload
from rag.pipeline import Pipeline
from rag.verifier.verification import cell_fields, cited_text, quote_lines

log = logging.getLogger("rag.server")
MEDIA_TYPE = "text/event-stream"
INTERNAL = "internal error; the server log has the details"
# The shape documented in the OpenAPI schema for the streamed 200 response of POST /ask.
STREAMED = {"content": {MEDIA_TYPE: {"schema": {
    "type": "string",
    "description": "Server-Sent Events: hits, evidence, statement (one per verified "
                   "statement), then done (the JSON answer) or error ({error, status})."}}}}
# Streams whose work is queued or running: the event loop holds tasks only weakly.
_RUNNING: set[asyncio.Task[None]] = set()


class ClientGone(Exception):
    """Raised inside the pipeline thread once nobody is listening any more."""


def wants_stream(accept: str) -> bool:
    """Whether an Accept header asks for the event stream."""
    return any(part.partition(";")[0].strip().lower() == MEDIA_TYPE
               for part in accept.split(","))


async def _in_pool(work: Callable[[], None], scope: anyio.CancelScope) -> None:
    """Run ``work`` on a worker of plain /ask's pool; cancelling ``scope`` while it still
    waits for a free worker means it never runs (once running, the worker stays taken until
    ``work`` returns, so the bound holds)."""
    with scope:
        await run_in_threadpool(work)


def _start(work: Callable[[], None]) -> anyio.CancelScope:
    """Queue ``work`` for the pool; the scope that withdraws it."""
    scope = anyio.CancelScope()
    task = asyncio.get_running_loop().create_task(_in_pool(work, scope))
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
    return scope


def event(kind: str, data: Any) -> bytes:
    """One Server-Sent Event; json.dumps keeps the data on one line."""
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def shaped(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as the plain JSON reply shows it: only the fields its model declares."""
    return model.model_validate(data).model_dump(mode="json")


def statement_payload(statement: Statement, evidence: Sequence[Evidence], docs: Path,
                      files: dict[str, list[str] | None]) -> dict[str, Any]:
    """A verified statement with its cited lines, as in the answer's `statements`."""
    chunks = {e.chunk.chunk_id: e.chunk for e in evidence}
    data = statement.to_dict()
    for citation in data["citations"]:
        chunk = chunks.get(citation["chunk_id"])
        start, end = citation["start_line"], citation["end_line"]
        expected = cited_text(chunk, start, end) if chunk is not None else ""
        lines, note = quote_lines(docs, citation["source_path"], start, end, expected, files,
                                  cols=(chunk.start_col, chunk.end_col) if chunk else (None, None))
        citation.update(lines=[{"number": n, "text": t} for n, t in lines], lines_note=note)
        if chunk is not None:
            citation.update(cell_fields(docs, chunk, start, end, files))
    return data


def stream_answer(pipeline: Pipeline, *, question: str, mode: str | None,
                  groups: Iterable[str], docs: Path, version: str,
                  status_for: Callable[[errors.RagError], int]) -> StreamingResponse:
    """The streamed answer to one question, as a response ready to send."""
    groups = list(groups)

    async def events() -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        gone = threading.Event()
        chosen: list[Evidence] = []
        files: dict[str, list[str] | None] = {}

        def send(item: bytes | None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop has closed: nobody to tell
                gone.set()

        def on_event(kind: str, value: Any) -> None:
            if gone.is_set():
                raise ClientGone
            if kind == "hits":
                hits: tuple[SearchHit, ...] = value
                send(event("hits", {"hits": [shaped(HitOut, h.to_dict()) for h in hits]}))
            elif kind == "evidence":
                chosen[:] = value
                send(event("evidence", {
                    "evidence": [shaped(EvidenceOut, e.to_dict()) for e in value]}))
            elif kind == "statement":
                send(event("statement", shaped(
                    StatementOut, statement_payload(value, chosen, docs, files))))

        def work() -> None:
            if gone.is_set():  # the client left while this waited for a worker
                return
            try:
                answer = pipeline.ask(question, mode=mode, groups=groups, on_event=on_event)
                if gone.is_set():
                    return
                payload = answer_payload(answer, docs, version)  # shaped as the plain reply
                send(event("done", shaped(AnswerOut, payload)))
            except ClientGone:
                log.info("client left; stopped answering %r", question[:80])
            except errors.RagError as exc:
                send(event("error", {"error": str(exc), "status": status_for(exc)}))
            except Exception as exc:  # the log has it, the client not
                log.error("unexpected error: %r", exc, exc_info=exc)
                send(event("error", {"error": INTERNAL, "status": 500}))
            finally:
                send(None)

        queued = _start(work)
        finished = False
        try:
            while (item := await queue.get()) is not None:
                yield item
            finished = True
        finally:  # also when the client disconnected and this generator was closed
            gone.set()
            queued.cancel()
            if not finished:
                log.info("client left the stream of %r", question[:80])

    return StreamingResponse(events(), media_type=MEDIA_TYPE,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
