"""The web page in a real headless Chromium against the app served on loopback.

Needs Debian's `chromium` (/usr/bin/chromium) and the `playwright` package; playwright's own
browser download is never used.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.core.config import Settings
from rag.generator.extractive import ExtractiveGenerator
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.interfaces.http.auth import add_token, remove_token
from rag.interfaces.http.server import create_app
from rag.reader.chunking import parse_document

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOT = Path("/tmp/rag-browser.png")  # a fixed place to look at the page after a run
# A document that tries to inject markup: it must show up as text, never run.
HOSTILE = """# Sandbox <b>mode</b>

## Isolation flag

The sandbox flag <img src=x onerror="window.__pwned=1"> turns isolation off.
Use it only for <script>window.__pwned=2</script> local experiments.
"""

if not CHROMIUM.is_file():
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is missing: pip install playwright")


def file_lines(docs: Path, path: str) -> list[str]:
    return parse_document((docs / path).read_bytes().decode("utf-8")).lines


@contextlib.contextmanager
def serving(docs: Path, tmp_path: Path, **options: object) -> Iterator[str]:
    """Base URL of the app run by uvicorn in a thread on a free loopback port.

    The server knows one API token, for ann (group staff), in tmp_path/tokens.json.
    """
    import uvicorn

    (docs / "sandbox.md").write_text(HOSTILE, encoding="utf-8")
    settings = Settings.model_validate(
        {"server": {"tokens_file": str(tmp_path / "tokens.json")}})
    embedder = FakeEmbedder()
    build_index(docs, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder, **options)  # type: ignore
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound here and handed over: no race for the port
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture
def token(tmp_path: Path) -> str:
    return add_token(tmp_path / "tokens.json", "ann", ("staff",))


@pytest.fixture
def served(docs: Path, tmp_path: Path, token: str) -> Iterator[tuple[str, Path]]:
    """(base URL, docs root) of a server that wants API tokens."""
    with serving(docs, tmp_path) as base:
        yield base, docs


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """One Chromium for the file; each test gets a context of its own (fresh storage)."""
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: object, served: tuple[str, Path]) -> Iterator[object]:
    base, _ = served
    outside: list[str] = []
    context = browser.new_context(viewport={"width": 1280, "height": 900})  # type: ignore
    try:
        tab = context.new_page()

        def only_loopback(route: object) -> None:
            url = route.request.url  # type: ignore[attr-defined]
            if url.startswith((base + "/", "data:")):
                route.continue_()  # type: ignore[attr-defined]
            else:
                outside.append(url)
                route.abort()  # type: ignore[attr-defined]

        tab.route("**/*", only_loopback)
        tab.goto(base + "/")
        yield tab
    finally:
        context.close()
    assert outside == [], f"the page tried to reach {outside}"


def streamed(body: str) -> dict[str, list[dict]]:
    """The data of each kind of Server-Sent Event in a streamed /ask body."""
    out: dict[str, list[dict]] = {}
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        out.setdefault(fields["event"], []).append(json.loads(fields["data"]))
    return out


def ask(page: object, question: str, status: int = 200) -> dict:
    """The answer the page got (the `done` event of its stream, or the JSON reply)."""
    page.fill("#question", question)  # type: ignore[attr-defined]
    with page.expect_response("**/ask") as response:  # type: ignore[attr-defined]
        page.click("#ask-button")  # type: ignore[attr-defined]
    assert response.value.status == status
    if status == 200:
        page.wait_for_selector("#result:not([hidden])")  # type: ignore[attr-defined]
    if response.value.headers["content-type"].startswith("text/event-stream"):
        return streamed(response.value.text())["done"][0]
    return response.value.json()


def shown_lines(page: object) -> list[tuple[int, str]]:
    numbers = page.locator("#viewer-lines .line-no").all_text_contents()  # type: ignore
    texts = page.locator("#viewer-lines .line-text").all_text_contents()  # type: ignore
    return [(int(n), t) for n, t in zip(numbers, texts, strict=True)]


def test_click_a_citation_shows_the_files_lines(page, served, tmp_path):
    _, docs = served
    # A locator wait, not wait_for_function: polling a JS string needs eval, which the
    # page's Content-Security-Policy (rightly) forbids.
    page.locator("#index-info", has_text="passages indexed").wait_for()
    body = ask(page, "Which port does the HTTP API listen on by default?")
    assert "8080" in page.text_content("#answer")
    assert page.is_visible("#badges .badge")  # extractive answers say so
    chips = page.locator("#chips .chip")
    assert chips.count() == len(body["citations"]) > 0
    for i, cite in enumerate(body["citations"]):
        chips.nth(i).click()
        page.wait_for_selector("#viewer:not([hidden])")
        assert page.text_content("#viewer-path") == cite["source_path"]
        assert page.text_content("#viewer-heading") == cite["heading"]
        lines = file_lines(docs, cite["source_path"])
        expected = [(n, lines[n - 1]) for n in range(cite["start_line"], cite["end_line"] + 1)]
        assert shown_lines(page) == expected
        assert chips.nth(i).get_attribute("aria-pressed") == "true"
    # a chip next to a statement opens the same lines as the one under Sources
    page.locator("#answer .chip").first.click()
    assert shown_lines(page)[0][0] == body["statements"][0]["citations"][0]["start_line"]
    page.screenshot(path=str(tmp_path / "answer.png"), full_page=True)
    page.screenshot(path=str(SHOT), full_page=True)
    assert (tmp_path / "answer.png").stat().st_size > 10_000


def test_document_markup_is_shown_as_text(page):
    body = ask(page, "What does the sandbox isolation flag turn off?")
    label = next(c["label"] for c in body["citations"] if c["source_path"] == "sandbox.md")
    page.click(f"#chips .chip[data-label='{label}']")
    texts = [t for _, t in shown_lines(page)]
    assert any('<img src=x onerror="window.__pwned=1">' in t for t in texts)
    assert all(s["text"] in page.text_content("#answer") for s in body["statements"])
    assert page.evaluate("window.__pwned") is None
    assert page.locator("#result img, #viewer img, #result script, #viewer b").count() == 0


def test_insufficient_evidence_and_errors_are_explained(page, served):
    ask(page, "xylophone quartz marmalade")
    assert page.is_visible("#insufficient")
    assert "Insufficient evidence" in page.text_content("#insufficient")
    assert page.locator("#chips .chip").count() == 0
    closest = page.locator("#closest .chip")  # the closest passages open like citations
    assert closest.count() > 0
    closest.first.click()
    page.wait_for_selector("#viewer:not([hidden])")
    path = page.text_content("#viewer-path")
    shown = shown_lines(page)
    assert shown and all(file_lines(served[1], path)[n - 1] == t for n, t in shown)
    page.fill("#question", "   ")
    page.click("#ask-button")
    assert page.is_visible("#error")
    assert "type a question" in page.text_content("#error")


def sign_in(page: object, token: str) -> None:
    page.fill("#token", token)  # type: ignore[attr-defined]
    with page.expect_response("**/health"):  # type: ignore[attr-defined]
        page.click("#signin-button")  # type: ignore[attr-defined]


def test_the_page_asks_for_a_token_and_staff_sources_need_it(page, served, token, tmp_path):
    question = "How is the admin token rotated?"
    page.locator("#signin").wait_for()
    assert page.is_hidden("#groups-field")  # the server does not believe claimed groups
    public = ask(page, question)
    assert all(not c["source_path"].startswith("staff/") for c in public["citations"])

    sign_in(page, "rag_wrong")
    page.locator("#signin-error", has_text="unknown or revoked API token").wait_for()
    assert page.is_hidden("#whoami")
    sign_in(page, token)
    page.locator("#whoami", has_text="Signed in as ann").wait_for()
    assert page.is_hidden("#signin") and page.input_value("#token") == ""
    with page.expect_request("**/ask") as sent:
        staff = ask(page, question)
    assert sent.value.headers["authorization"] == f"Bearer {token}"
    assert any(c["source_path"] == "staff/runbook.md" for c in staff["citations"])
    assert "staff/runbook.md" in page.text_content("#chips")

    page.reload()  # kept for the session: still signed in
    page.locator("#whoami", has_text="Signed in as ann").wait_for()
    remove_token(tmp_path / "tokens.json", "ann")  # revoked while the page is open
    ask(page, question, status=401)
    page.locator("#error", has_text="sign in again").wait_for()
    assert page.is_visible("#signin") and page.is_hidden("#whoami")
    assert page.evaluate("sessionStorage.length") == 0


def test_public_only_hides_the_prompt_and_sign_out_forgets_the_token(page, served, token):
    page.locator("#signin").wait_for()
    page.click("#skip-button")
    assert page.is_hidden("#signin")
    page.reload()
    page.locator("#index-info", has_text="passages indexed").wait_for()
    assert page.is_hidden("#signin")  # the choice holds for the session
    page.evaluate("sessionStorage.clear()")
    page.reload()
    page.locator("#signin").wait_for()
    sign_in(page, token)
    page.locator("#whoami", has_text="ann").wait_for()
    page.click("#signout-button")
    assert page.is_visible("#signin") and page.is_hidden("#whoami")
    assert page.evaluate("sessionStorage.length") == 0


def test_the_dev_flag_shows_the_groups_field(browser, docs, tmp_path):
    with serving(docs, tmp_path, trust_claimed_groups=True) as base:
        context = browser.new_context()
        try:
            tab = context.new_page()
            tab.goto(base + "/")
            tab.locator("#groups-field").wait_for()
            tab.fill("#groups", "staff")
            body = ask(tab, "How is the admin token rotated?")
        finally:
            context.close()
    assert any(c["source_path"] == "staff/runbook.md" for c in body["citations"])



def test_fallback_unsupported_budget_and_stale_lines_are_flagged(page, served, tmp_path):
    """Render states the extractive generator cannot produce, from a real answer altered."""
    import json

    body = ask(page, "Which port does the HTTP API listen on by default?")
    flagged = {**body, "extractive_fallback": True, "generator": "local"}
    flagged["unsupported"] = [{**body["statements"][-1], "supported": False}]
    flagged["statements"] = body["statements"][:-1]
    hit = body["evidence"][0]
    flagged["excluded"] = [{"chunk_id": "0" * 16, "reason": "budget", "source_path": "faq.md",
                            "start_line": 12, "end_line": 15, "heading": "FAQ > Disk"}]
    stale = {**body["citations"][0], "lines": [],
             "lines_note": f"{hit['source_path']} has changed since it was indexed; re-index"}
    flagged["citations"] = [stale, *body["citations"][1:]]
    page.route("**/ask", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(flagged)))
    ask(page, "Which port does the HTTP API listen on by default?")
    assert "Extractive fallback" in page.text_content("#badges")
    assert page.is_visible("#unsupported-section")
    assert flagged["unsupported"][0]["text"] in page.text_content("#unsupported")
    assert page.is_visible("#budget-section")
    assert "faq.md:12-15" in page.text_content("#budget")
    page.click(f"#chips .chip[data-label='{stale['label']}']")
    assert page.is_visible("#viewer-note") and "changed since" in page.text_content("#viewer-note")
    assert shown_lines(page) == []
    page.screenshot(path=str(tmp_path / "flagged.png"), full_page=True)
    page.screenshot(path="/tmp/rag-browser-flagged.png", full_page=True)

    page.route("**/ask", lambda route: route.fulfill(
        status=503, content_type="application/json",
        body=json.dumps({"error": "model endpoint http://127.0.0.1:9/v1 is not answering"})))
    page.fill("#question", "anything")
    page.click("#ask-button")
    page.wait_for_selector("#error:not([hidden])")
    assert page.text_content("#error") == (
        "The model is not answering: model endpoint http://127.0.0.1:9/v1 is not answering")
    assert page.is_hidden("#result")


def test_the_page_streams_the_stages_with_a_timer_and_can_cancel(page, served, monkeypatch,
                                                                 caplog):
    """While the model works the page shows the stages so far and a running clock; Cancel
    stops waiting, and the next question still gets its answer."""
    caplog.set_level(logging.INFO, logger="rag.server")
    entered, release = threading.Event(), threading.Event()
    original = ExtractiveGenerator.generate

    def slow(self: object, question: str, evidence: object, **reading: object) -> object:
        entered.set()
        release.wait(20)
        return original(self, question, evidence, **reading)  # type: ignore[arg-type]

    monkeypatch.setattr(ExtractiveGenerator, "generate", slow)
    try:
        page.fill("#question", "Which port does the HTTP API listen on by default?")
        page.click("#ask-button")
        page.locator("#stages li", has_text="as evidence").wait_for()
        assert "matching passages" in page.text_content("#stages")
        assert entered.wait(10) and page.is_disabled("#ask-button")
        page.locator("#elapsed", has_text="1 s").wait_for(timeout=5000)  # the clock runs
        page.click("#cancel-button")
        page.locator("#status", has_text="Cancelled after").wait_for()
        assert page.is_enabled("#ask-button") and page.is_hidden("#cancel-button")
        assert page.is_hidden("#result")
        deadline = time.monotonic() + 10  # the server sees the page leave the stream...
        while "client left the stream" not in caplog.text:
            assert time.monotonic() < deadline, "the server never saw the page cancel"
            time.sleep(0.05)
    finally:
        release.set()
    deadline = time.monotonic() + 10  # ...and stops at the next stage, without answering
    while "stopped answering" not in caplog.text:
        assert time.monotonic() < deadline, "the server went on after the page cancelled"
        time.sleep(0.05)
    monkeypatch.undo()
    body = ask(page, "Which port does the HTTP API listen on by default?")
    assert "8080" in page.text_content("#answer") and body["statements"]
    assert page.is_hidden("#progress")


def test_code_an_extractive_answer_quotes_is_shown_as_code(page, served):
    """The code a quoted sentence brings is a block of its own, not words run into the prose."""
    ask(page, "What does a minimal file that changes the retention and the data directory look like?")
    code = page.text_content("#answer pre code")
    assert code is not None and "retention_days = 30" in code
    assert "retention_days" not in " ".join(page.locator("#answer p").all_text_contents())


def test_answers_are_rendered_as_markdown_without_markup(page, served):
    """Code fences become <pre>, lists become lists; HTML in the text stays text."""
    body = ask(page, "Which port does the HTTP API listen on by default?")
    first = body["statements"][0]
    text = ("**Type**: `int`\n**Default**: `8080`\n\n"
            "**Start** it with `rag serve` for _path operations_ (see *max_per_source*):\n\n"
            "```bash\nrag serve --port 8080\n```\n\n"
            "- one <img src=x onerror=\"window.__pwned=3\">\n- [two](javascript:void)\n"
            "- [three](https://example.org/guide)")
    cites = [{**c, "heading": "Server > `--port` <b>bold</b>"} for c in body["citations"]]
    done = {**body, "statements": [{**first, "text": text}], "citations": cites}
    stream = "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in (
        ("hits", {"hits": body["evidence"]}), ("evidence", {"evidence": body["evidence"]}),
        ("statement", done["statements"][0]), ("done", done)))
    page.route("**/ask", lambda route: route.fulfill(
        status=200, content_type="text/event-stream", body=stream))
    ask(page, "Which port does the HTTP API listen on by default?")
    assert page.text_content("#answer pre code") == "rag serve --port 8080"
    assert page.locator("#answer p code").all_text_contents() == ["int", "8080", "rag serve"]
    assert page.locator("#answer p strong").all_text_contents() == ["Type", "Default", "Start"]
    assert page.locator("#answer p").first.inner_text() == "Type: int\nDefault: 8080"
    assert page.locator("#answer p em").all_text_contents() == ["path operations", "max_per_source"]
    items = page.locator("#answer li").all_text_contents()
    assert items == ['one <img src=x onerror="window.__pwned=3">', "two", "three"]
    assert page.locator("#answer img").count() == 0
    links = page.locator("#answer a")  # a web link only: no javascript: link
    assert links.count() == 1 and links.get_attribute("href") == "https://example.org/guide"
    assert page.evaluate("window.__pwned") is None
    # a heading beside its chip shows its code names as code, and its markup as text
    assert page.locator("#chips .heading-inline code").first.text_content() == "--port"
    assert "<b>bold</b>" in page.text_content("#chips") and page.locator("#chips b").count() == 0
    page.locator("#answer .chip").first.click()  # the chips still open the cited lines
    page.wait_for_selector("#viewer:not([hidden])")
    assert page.text_content("#index-version") not in page.text_content("#index-info")



def test_a_notebook_citation_names_its_cell_on_the_page(browser, tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(Path(__file__).parent / "fixtures" / "formats", docs)
    with serving(docs, tmp_path) as base:
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(base + "/")
            body = ask(page, "How do I drop the rows without answers before counting?")
            cite = next(c for c in body["citations"] if c["source_path"] == "demo.ipynb")
            assert cite["cell"] == 3
            chip = page.locator(f"#chips .chip[data-label='{cite['label']}']")
            assert "demo.ipynb:37 [cell 3, line 3]" in chip.text_content()
            chip.click()
            assert page.text_content("#viewer-range").endswith("[cell 3, line 3]")
        finally:
            context.close()
