"""`POST /ask` with `Accept: text/event-stream` (rag.interfaces.http.streaming): the events a client sees."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.core.errors import GenerationError
from rag.indexer.indexing import build_index
from rag.interfaces.http.server import create_app
from rag.interfaces.http.streaming import stream_answer
from rag.pipeline import Pipeline, open_retriever
from tests.live_server import free_port, post, read_all, serving, status_and_body
from tests.test_server import PORT_QUESTION, TOKEN_QUESTION, make_client, with_tokens

STREAM = {"Accept": "text/event-stream"}


def events(text: str) -> list[tuple[str, dict]]:
    """(event, data) pairs of a Server-Sent Events body."""
    out = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        out.append((fields["event"], json.loads(fields["data"])))
    return out


@pytest.fixture
def client(docs: Path, tmp_path: Path, settings, embedder) -> Iterator[tuple[TestClient, dict]]:
    settings, users = with_tokens(settings, tmp_path)
    with make_client(docs, tmp_path, settings, embedder) as c:
        yield c, users


def test_stages_arrive_in_order_and_done_is_the_plain_answer(client):
    c, _ = client
    resp = c.post("/ask", json={"question": PORT_QUESTION}, headers=STREAM)
    assert resp.status_code == 200 and resp.headers["content-type"].startswith(
        "text/event-stream")
    got = events(resp.text)
    kinds = [kind for kind, _ in got]
    assert kinds[:2] == ["hits", "evidence"] and kinds[-1] == "done"
    assert set(kinds[2:-1]) == {"statement"}
    done = got[-1][1]
    plain = c.post("/ask", json={"question": PORT_QUESTION}).json()
    assert {**done, "timings": None} == {**plain, "timings": None}
    assert "8080" in done["answer"]
    # each statement event is the answer's statement, cited lines included
    assert [data for kind, data in got if kind == "statement"] == done["statements"]
    assert got[1][1]["evidence"] == done["evidence"]
    assert got[0][1]["hits"][0]["source_path"] == "server-ports.md"


def test_without_the_header_the_answer_is_plain_json(client):
    c, _ = client
    resp = c.post("/ask", json={"question": PORT_QUESTION}, headers={"Accept": "*/*"})
    assert resp.headers["content-type"] == "application/json"
    assert "8080" in resp.json()["answer"]


def test_insufficient_evidence_streams_no_statement(client):
    c, _ = client
    got = events(c.post("/ask", json={"question": "xylophone quartz marmalade"},
                        headers=STREAM).text)
    assert [k for k, _ in got if k == "statement"] == []
    assert got[-1][0] == "done" and got[-1][1]["insufficient_evidence"]


def test_a_failing_model_ends_the_stream_with_one_error_event(client):
    c, _ = client

    class Down:
        def generate(self, question, evidence):
            raise GenerationError("model endpoint http://127.0.0.1:9/v1 is not answering")

    c.app.state.rag.shared._generator = Down()
    got = events(c.post("/ask", json={"question": PORT_QUESTION}, headers=STREAM).text)
    assert [k for k, _ in got] == ["hits", "evidence", "error"]
    assert got[-1][1] == {"error": "model endpoint http://127.0.0.1:9/v1 is not answering",
                          "status": 503}


def test_refusals_come_before_any_stream(client):
    c, _ = client
    blank = c.post("/ask", json={"question": " "}, headers=STREAM)
    assert (blank.status_code, blank.json()) == (422, {"error": "question: must not be empty"})
    bad = c.post("/ask", json={"question": "x"},
                 headers={**STREAM, "Authorization": "Bearer rag_wrong"})
    assert bad.status_code == 401 and "event:" not in bad.text
    host = c.post("/ask", json={"question": "x"}, headers={**STREAM, "Host": "evil.example"})
    assert host.status_code == 421


def test_an_anonymous_caller_sees_no_restricted_passage_in_any_event(client):
    c, users = client
    anon = c.post("/ask", json={"question": TOKEN_QUESTION, "groups": ["staff"]},
                  headers=STREAM).text
    assert "staff/runbook.md" not in anon  # the claimed group is ignored without a token
    for kind, data in events(anon):
        for item in data.get("hits", []) + data.get("evidence", []):
            assert item["visibility"] in ([], ["public"]), (kind, item["source_path"])
    staff = c.post("/ask", json={"question": TOKEN_QUESTION},
                   headers={**STREAM, **users["ann"]}).text
    assert "staff/runbook.md" in staff  # the same question does reach it with a token


def test_a_client_that_leaves_stops_the_work_at_the_next_stage(tmp_path):
    """Closing the stream (what a disconnect does) makes the next stage raise in the worker."""
    entered, release = threading.Event(), threading.Event()
    outcome: list[str] = []

    class Slow(Pipeline):
        def __init__(self) -> None:  # no index needed: ask is replaced
            pass

        def ask(self, question, *, mode=None, groups=(), on_event=None):
            on_event("hits", ())
            entered.set()
            release.wait(10)
            try:
                on_event("evidence", ())
            except Exception as exc:  # what the stream raised is the point
                outcome.append(type(exc).__name__)
                raise
            outcome.append("went on")
            raise AssertionError("unreachable")

    async def run() -> bytes:
        response = stream_answer(Slow(), question="q", mode=None, groups=(), docs=tmp_path,
                                 version="v", status_for=lambda exc: 500)
        body = response.body_iterator
        first = await body.__anext__()
        assert entered.wait(10)
        await body.aclose()  # the client went away
        release.set()
        return first

    first = asyncio.run(run())
    assert first.startswith(b"event: hits\n")
    for _ in range(100):
        if outcome:
            break
        threading.Event().wait(0.05)
    assert outcome == ["ClientGone"]


# The bound on worker threads plain /ask runs under (anyio's default thread limiter, which
# FastAPI uses for every sync endpoint); streamed /ask must stay under the same one.
WORKERS = 40


class HeldModel:
    """A generator that holds every call until released, counting the calls in flight."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.calls = self.running = self.peak = 0

    def use_embedder(self, embedder: object) -> None:
        self.inner.use_embedder(embedder)  # type: ignore[attr-defined]

    def generate(self, question, evidence):
        with self._lock:
            self.calls += 1
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            assert self.release.wait(60), "never released"
            return self.inner.generate(question, evidence)  # type: ignore[attr-defined]
        finally:
            with self._lock:
                self.running -= 1

    def wait_for(self, running: int, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while self.running < running:
            assert time.monotonic() < deadline, f"{self.running} calls in flight, not {running}"
            time.sleep(0.05)


@pytest.fixture
def live(docs: Path, tmp_path: Path, settings, embedder) -> Iterator[tuple[int, HeldModel]]:
    """A real server on a free port whose model holds every call until released."""
    build_index(docs, tmp_path / "index", settings, embedder)
    port = free_port()
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder, port=port)
    with serving(app, port):
        model = HeldModel(app.state.rag.shared.get())
        app.state.rag.shared._generator = model
        try:
            yield port, model
        finally:
            model.release.set()


def _ask(port: int, stream: bool) -> socket.socket:
    body = json.dumps({"question": PORT_QUESTION}).encode()
    return post(port, "/ask", body, STREAM if stream else {"Accept": "application/json"})


def test_streams_and_plain_asks_share_one_worker_bound(live):
    """More streams than workers: the model never sees more calls at once than plain /ask
    allows, the server starts no thread per stream, and every request still gets its answer."""
    port, model = live
    before = {t.ident for t in threading.enumerate()}
    replies: list[bytes] = []

    def client(stream: bool) -> None:
        replies.append(read_all(_ask(port, stream)))

    clients = [threading.Thread(target=client, args=(i % 10 != 0,), daemon=True)
               for i in range(WORKERS + 12)]
    for thread in clients:
        thread.start()
    model.wait_for(WORKERS)
    time.sleep(1.0)  # time enough for any request outside the bound to reach the model too
    mine = {t.ident for t in clients}
    server_threads = [t for t in threading.enumerate()
                      if t.ident not in before and t.ident not in mine]
    assert model.peak == WORKERS
    assert len(server_threads) <= WORKERS
    model.release.set()
    for thread in clients:
        thread.join(60)
    assert len(replies) == len(clients) and model.calls == len(clients)
    for raw in replies:
        status, body = status_and_body(raw)
        assert status == 200 and (b"event: done" in body or b'"answer"' in body), body[-200:]


def test_a_stream_whose_client_leaves_while_queued_never_reaches_the_model(live):
    port, model = live
    holders = [threading.Thread(target=lambda: read_all(_ask(port, True)), daemon=True)
               for _ in range(WORKERS)]
    for thread in holders:
        thread.start()
    model.wait_for(WORKERS)
    late = _ask(port, True)  # no worker is free: it waits
    time.sleep(0.5)
    late.close()  # the client gives up
    time.sleep(0.5)
    model.release.set()
    for thread in holders:
        thread.join(60)
    time.sleep(1.0)  # time enough for the late stream to reach the model, were it to go on
    assert model.calls == WORKERS


def test_a_client_that_leaves_before_generation_costs_no_model_call(docs, tmp_path, settings,
                                                                   embedder):
    """Gone after the evidence event, while the answerability check runs: the model is
    never called."""
    build_index(docs, tmp_path / "index", settings, embedder)
    pipeline = Pipeline(tmp_path / "index", settings, generator="extractive",
                        retriever=open_retriever(tmp_path / "index", settings, embedder))
    checking, release = threading.Event(), threading.Event()
    real = pipeline.answerable
    calls: list[str] = []

    def slow_answerable(*args, **kwargs):
        checking.set()
        assert release.wait(10)
        return real(*args, **kwargs)

    class Counting:
        def generate(self, question, evidence):
            calls.append(question)
            raise AssertionError("the model was called for a client that had left")

    pipeline.answerable = slow_answerable  # type: ignore[method-assign]
    pipeline.generator = lambda: Counting()  # type: ignore[method-assign]

    async def run() -> list[bytes]:
        response = stream_answer(pipeline, question=PORT_QUESTION, mode=None, groups=(),
                                 docs=docs, version="v", status_for=lambda exc: 500)
        body = response.body_iterator
        got = [await body.__anext__(), await body.__anext__()]
        assert await asyncio.to_thread(checking.wait, 10)
        await body.aclose()  # the client went away
        release.set()
        return got

    got = asyncio.run(run())
    assert got[1].startswith(b"event: evidence\n")
    time.sleep(1.0)  # time enough for the worker to reach the model, were it to go on
    assert calls == []
