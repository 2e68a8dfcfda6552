"""`POST /ask` with `Accept: text/event-stream` (rag.streaming): the events a client sees."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.errors import GenerationError
from rag.pipeline import Pipeline
from rag.streaming import stream_answer
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
