"""HTTP API (rag.interfaces.http.server) through FastAPI's TestClient: fake embedder, extractive generator."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.core.config import Settings
from rag.core.errors import GenerationError
from rag.generator.extractive import ExtractiveGenerator
from rag.indexer import indexing
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.interfaces.http.auth import add_token
from rag.interfaces.http.server import WEB, create_app
from rag.retriever.retrieval import FILTER_CACHE, Retriever
from rag.stores import folder as store
from tests.live_server import free_port, post, read_all, serving, status_and_body

PORT_QUESTION = "Which port does the HTTP API listen on by default?"
TOKEN_QUESTION = "How is the admin token rotated and where is it stored?"


def file_lines(docs: Path, path: str) -> list[str]:
    """The file's lines as an editor numbers them (BOM dropped, CRLF as one break)."""
    text = (docs / path).read_bytes().decode("utf-8-sig").replace("\r\n", "\n")
    return text.split("\n")


def with_tokens(settings: Settings, tmp_path: Path) -> tuple[Settings, dict[str, dict]]:
    """Settings naming a tokens file with two users, and the headers each sends."""
    path = tmp_path / "tokens.json"
    settings = settings.model_copy(update={"server": settings.server.model_copy(
        update={"tokens_file": str(path)})})
    return settings, {name: {"Authorization": f"Bearer {add_token(path, name, groups)}"}
                      for name, groups in (("ann", ("staff",)), ("bob", ("sales",)))}


def make_client(docs: Path, tmp_path: Path, settings: Settings, embedder: FakeEmbedder,
                **options: object) -> TestClient:
    build_index(docs, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder, **options)  # type: ignore
    return TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1:8000")


@pytest.fixture
def authed(settings: Settings, tmp_path: Path) -> tuple[Settings, dict[str, dict]]:
    return with_tokens(settings, tmp_path)


@pytest.fixture
def user(authed: tuple[Settings, dict[str, dict]]) -> dict[str, dict]:
    """Headers per user: ann (staff), bob (sales)."""
    return authed[1]


@pytest.fixture
def client(docs: Path, tmp_path: Path, authed: tuple[Settings, dict[str, dict]],
           embedder: FakeEmbedder) -> Iterator[TestClient]:
    with make_client(docs, tmp_path, authed[0], embedder) as c:
        yield c


def chunk_ids(index_root: Path) -> set[str]:
    return {c.chunk_id for c in store.load(index_root).chunks}


def test_health_reports_the_loaded_index_and_who_is_asking(client, tmp_path, user):
    body = client.get("/health").json()
    version = store.load(tmp_path / "index")
    public = sum(1 for c in version.chunks if not c.visibility)
    assert public < len(version.chunks)  # the fixture docs hold restricted chunks
    # Anonymous callers count only public chunks: the total would say how much is hidden.
    assert body == {"status": "ok", "chunks": public, "version": version.path.name,
                    "user": None, "tokens": True, "claimed_groups": False}
    staff = client.get("/health", headers=user["ann"]).json()
    assert staff["user"] == "ann" and staff["chunks"] == len(version.chunks)


def test_search_hits_carry_their_place_and_text(client, docs):
    resp = client.get("/search", params={"q": "default ports", "k": 3})
    assert resp.status_code == 200
    hits = resp.json()["hits"]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert hits[0]["source_path"] == "server-ports.md"
    for hit in hits:
        lines = file_lines(docs, hit["source_path"])
        assert "\n".join(lines[hit["start_line"] - 1:hit["end_line"]]) == hit["text"]
        assert {"heading", "chunk_id", "score"} <= set(hit)


def test_search_shows_staff_docs_only_to_staff(client, user):
    def paths(headers: dict) -> set[str]:
        resp = client.get("/search", params={"q": "rotate admin token vault", "k": 50},
                          headers=headers)
        return {h["source_path"] for h in resp.json()["hits"]}

    assert "staff/runbook.md" not in paths({})
    assert "staff/runbook.md" not in paths(user["bob"])
    assert "staff/runbook.md" in paths(user["ann"])


def test_ask_citations_show_the_files_own_lines(client, docs):
    resp = client.post("/ask", json={"question": PORT_QUESTION})
    assert resp.status_code == 200
    body = resp.json()
    assert not body["insufficient_evidence"] and "8080" in body["answer"]
    assert body["citations"], "an answer about ports cites something"
    for cite in body["citations"]:
        lines = file_lines(docs, cite["source_path"])
        expected = [{"number": n, "text": lines[n - 1]}
                    for n in range(cite["start_line"], cite["end_line"] + 1)]
        assert cite["lines"] == expected and cite["lines_note"] is None
    # the file with a BOM is numbered as an editor shows it
    assert any(c["source_path"] == "server-ports.md" for c in body["citations"])


def test_ask_uses_the_askers_groups(client, user):
    public = client.post("/ask", json={"question": TOKEN_QUESTION}).json()
    staff = client.post("/ask", json={"question": TOKEN_QUESTION}, headers=user["ann"]).json()
    assert all(not e["source_path"].startswith("staff/") for e in public["evidence"])
    assert "4242" not in public["answer"]
    assert any(c["source_path"] == "staff/runbook.md" for c in staff["citations"])


def test_cited_lines_are_withheld_when_the_file_changed(client, docs):
    path = docs / "server-ports.md"
    path.write_bytes(path.read_bytes().replace(b"| 8080 |", b"| 8081 |"))
    body = client.post("/ask", json={"question": PORT_QUESTION}).json()
    cite = next(c for c in body["citations"] if c["source_path"] == "server-ports.md")
    assert cite["lines"] == []
    assert "changed since it was indexed" in cite["lines_note"]


def test_reindex_picks_up_an_edited_file(client, docs, user):
    def zanzibar_hits() -> list[dict]:
        hits = client.get("/search", params={"q": "zanzibar", "mode": "lexical"}).json()["hits"]
        return [h for h in hits if "zanzibar" in h["text"]]

    before = client.get("/health").json()["version"]
    assert zanzibar_hits() == []
    with open(docs / "faq.md", "a", encoding="utf-8") as fh:
        fh.write("\n## Where is the data centre?\n\nThe primary data centre is in zanzibar.\n")
    resp = client.post("/index", json={}, headers=user["bob"])
    assert resp.status_code == 200
    assert resp.json()["report"]["changed"] == ["faq.md"]
    assert resp.json()["version"] != before
    assert client.get("/health").json()["version"] == resp.json()["version"]
    hit = zanzibar_hits()[0]
    assert hit["source_path"] == "faq.md"
    assert file_lines(docs, "faq.md")[hit["end_line"] - 1].endswith("zanzibar.")


def _gate_reindex(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Make build_index wait until released, so requests can arrive mid re-index."""
    entered, release = threading.Event(), threading.Event()
    real = indexing.build_index

    def gated(*args, **kwargs):
        entered.set()
        assert release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(indexing, "build_index", gated)
    return entered, release


def test_second_reindex_at_once_gets_409_and_search_keeps_answering(
        client, docs, tmp_path, monkeypatch, user):
    entered, release = _gate_reindex(monkeypatch)
    old_version = client.get("/health").json()["version"]
    old_ids = chunk_ids(tmp_path / "index")
    first: dict = {}
    worker = threading.Thread(target=lambda: first.update(
        resp=client.post("/index", json={}, headers=user["ann"])))
    (docs / "faq.md").write_text("# FAQ\n\nEverything about the moon base.\n", encoding="utf-8")
    worker.start()
    try:
        assert entered.wait(10)
        second = client.post("/index", json={"rebuild": True}, headers=user["bob"])
        assert second.status_code == 409
        assert second.json() == {"error": "a re-index is already running; "
                                          "try again when it has finished"}
        during = client.get("/search", params={"q": "moon base questions"}).json()
        assert during["version"] == old_version
        assert {h["chunk_id"] for h in during["hits"]} <= old_ids
    finally:
        release.set()
        worker.join(20)
    assert first["resp"].status_code == 200
    new_ids = chunk_ids(tmp_path / "index")
    after = client.get("/search", params={"q": "moon base questions"}).json()
    assert after["version"] == first["resp"].json()["version"] != old_version
    assert {h["chunk_id"] for h in after["hits"]} <= new_ids
    assert any("moon base" in h["text"] for h in after["hits"])


def test_an_answer_in_flight_keeps_the_index_it_started_with(client, docs, tmp_path, user):
    state = client.app.state.rag
    started, release = threading.Event(), threading.Event()

    class SlowExtractive(ExtractiveGenerator):
        def generate(self, question, evidence, **reading):
            started.set()
            assert release.wait(20)
            return super().generate(question, evidence, **reading)

    state.shared._generator = SlowExtractive()
    old_version = client.get("/health").json()["version"]
    old_ids = chunk_ids(tmp_path / "index")
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.update(resp=client.post("/ask", json={"question": PORT_QUESTION})))
    worker.start()
    try:
        assert started.wait(10)
        path = docs / "server-ports.md"
        path.write_bytes(path.read_bytes().replace(b"Tidewatch listens", b"Tidewatch serves"))
        assert client.post("/index", json={}, headers=user["ann"]).status_code == 200
        assert client.get("/health").json()["version"] != old_version
    finally:
        release.set()
        worker.join(20)
    body = result["resp"].json()
    assert body["index_version"] == old_version
    assert {e["chunk_id"] for e in body["evidence"]} <= old_ids


def test_budget_exclusions_name_their_source(docs, tmp_path, embedder):
    tight = Settings.model_validate({"generation": {"context_tokens": 1000, "max_tokens": 16},
                                     "evidence": {"max_per_source": 5}})
    with make_client(docs, tmp_path, tight, embedder) as c:
        body = c.post("/ask", json={"question": "server port configuration"}).json()
    budget = [e for e in body["excluded"] if e["reason"] == "budget"]
    assert body["evidence"] and budget
    assert all(e["source_path"] and e["start_line"] >= 1 for e in budget)


@pytest.mark.parametrize("payload, where", [
    ({"question": "   "}, "question: must not be empty"),
    ({"question": ""}, "question: must not be empty"),
    ({}, "question: Field required"),
    ({"question": "ports?", "mode": "fuzzy"}, "mode: Input should be"),
    ({"question": "ports?", "groups": "staff"}, "groups: Input should be a valid list"),
    ({"question": "ports?", "group": ["staff"]}, "group: Extra inputs are not permitted"),
])
def test_bad_ask_requests_get_one_clear_error(client, payload, where):
    resp = client.post("/ask", json=payload)
    assert resp.status_code == 422
    assert list(resp.json()) == ["error"] and resp.json()["error"].startswith(where)


def test_error_shapes(client, monkeypatch):
    for blank in ("", "  ", "\t\x1c"):
        empty = client.get("/search", params={"q": blank})
        assert (empty.status_code, empty.json()) == (422, {"error": "q: must not be empty"})
    assert client.get("/search", params={"q": "x", "k": 0}).status_code == 422
    assert client.get("/nowhere").json() == {"error": "Not Found"}

    state = client.app.state.rag

    class Down:
        def generate(self, question, evidence):
            raise GenerationError("model endpoint http://127.0.0.1:9/v1 is not answering")

    state.shared._generator = Down()
    down = client.post("/ask", json={"question": PORT_QUESTION})
    assert down.status_code == 503
    assert down.json() == {"error": "model endpoint http://127.0.0.1:9/v1 is not answering"}

    def broken(*args, **kwargs):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(state.pipeline.retriever, "search", broken)
    crash = client.get("/search", params={"q": "ports"})
    assert crash.status_code == 500
    assert "secret" not in crash.text and "Traceback" not in crash.text
    assert crash.json() == {"error": "internal error; the server log has the details"}


def test_page_is_self_contained_and_never_injects_markup(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert 'id="question"' in page.text and 'id="token"' in page.text
    for name in ("app.js", "markdown.js", "style.css"):
        assert client.get(f"/static/{name}").status_code == 200
    for path in WEB.iterdir():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(src|href)=[\"']?(https?:)?//", text), path.name
        assert "@import" not in text and "url(http" not in text, path.name
    for script in WEB.glob("*.js"):
        text = script.read_text(encoding="utf-8")
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write",
                             text), script.name


def test_many_distinct_group_sets_keep_the_filter_cache_bounded(docs, tmp_path, settings,
                                                                embedder):
    """60,000 group sets once grew a server by 500 MB: each kept its own filter forever."""
    build_index(docs, tmp_path / "index", settings, embedder)
    retriever = Retriever(store.load(tmp_path / "index"), embedder, settings.retrieval)

    def sees_runbook(groups: set[str]) -> bool:
        hits = retriever.search("rotate admin token vault", k=50, mode="lexical", groups=groups)
        return any(h.chunk.source_path == "staff/runbook.md" for h in hits)

    assert sees_runbook({"staff"})
    for i in range(FILTER_CACHE * 5):
        assert not sees_runbook({f"team-{i}", "sales"})
        assert len(retriever._filters) <= FILTER_CACHE
    assert len(retriever._filters) == FILTER_CACHE
    assert frozenset({"staff"}) not in retriever._filters  # the least recently used went first
    assert sees_runbook({"staff"}) and not sees_runbook({"team-0", "sales"})  # rebuilt right


LIMIT_ERROR = "request body over the {}-byte limit ([server] max_body_bytes)"


@pytest.fixture
def live(docs: Path, tmp_path: Path, settings: Settings,
         embedder: FakeEmbedder) -> Iterator[tuple[int, Settings]]:
    """A real server on a free port, with a 4 KB body limit."""
    settings = settings.model_copy(update={"server": settings.server.model_copy(
        update={"max_body_bytes": 4096})})
    build_index(docs, tmp_path / "index", settings, embedder)
    port = free_port()
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder, port=port)
    with serving(app, port):
        yield port, settings


def _one_line_413(raw: bytes, limit: int) -> None:
    status, body = status_and_body(raw)
    assert (status, json.loads(body)) == (413, {"error": LIMIT_ERROR.format(limit)}), raw[:300]
    assert body.count(b"\n") == 0


@pytest.mark.parametrize("path", ["/ask", "/verify", "/index"])
def test_a_body_declared_over_the_limit_is_refused_before_it_is_sent(live, path):
    """Content-Length: 100 MB and not a byte sent: the answer comes at once, nothing read."""
    port, _ = live
    sock = post(port, path, b"", {"Content-Length": str(100_000_000)})
    sock.settimeout(10)  # the server used to wait for all 100 MB, then parse them
    _one_line_413(read_all(sock), 4096)


def test_a_chunked_body_is_counted_and_refused_once_past_the_limit(live):
    """No Content-Length: the bytes are counted as they come, and one past the limit is
    enough; a chunked body within the limit is answered as usual."""
    port, _ = live

    def chunked(data: bytes, *, last: bool) -> bytes:
        pieces = [data[i:i + 1000] for i in range(0, len(data), 1000)]
        return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + (
            b"0\r\n\r\n" if last else b"")

    big = post(port, "/ask", chunked(b" " * 4097, last=False),  # and never the last chunk
               {"Transfer-Encoding": "chunked"})
    big.settimeout(10)
    _one_line_413(read_all(big), 4096)
    body = json.dumps({"question": PORT_QUESTION}).encode()
    small = post(port, "/ask", chunked(body, last=True), {"Transfer-Encoding": "chunked"})
    small.settimeout(30)
    status, reply = status_and_body(read_all(small))
    assert status == 200 and "8080" in json.loads(reply)["answer"]


def test_bodies_up_to_the_limit_are_answered_and_one_byte_more_is_not(client):
    limit = Settings().server.max_body_bytes
    payload = json.dumps({"question": PORT_QUESTION})
    padded = payload[:-1] + " " * (limit - len(payload)) + "}"  # exactly the limit
    ok = client.post("/ask", content=padded, headers={"Content-Type": "application/json"})
    assert ok.status_code == 200 and "8080" in ok.json()["answer"]
    over = client.post("/ask", content=padded + " ", headers={"Content-Type": "application/json"})
    assert (over.status_code, over.json()) == (413, {"error": LIMIT_ERROR.format(limit)})
    assert "default-src 'none'" in over.headers["content-security-policy"]
