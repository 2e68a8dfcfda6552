"""`rag check`: any text checked against the docs, sentence by sentence, through the library,
the command line, HTTP and MCP, over a copy of the demo docs in corpus/."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import rag
from rag.core.config import Settings
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.interfaces.cli.main import app
from rag.interfaces.http.auth import add_token
from rag.interfaces.http.server import create_app
from rag.interfaces.mcp_server import DocsTools
from rag.pipeline import Pipeline
from tests.conftest import REPO

# A draft answer about the demo docs: true sentences, and sentences altered the way a
# careless writer alters them (a number, an identifier, a negation), one unknown claim, and
# one only a staff-only file states. Line -> status for a caller outside the staff group.
DRAFT = """\
# A draft answer about rag

The server binds to the loopback address 127.0.0.1 and port 8000 by default.

The HTTP server listens on port 8080 unless you pass `--port`.

Any setting can be overridden by an environment variable.

Export `RAG_RETRIEVAL__TOP=5` to ask for 5 hits in this shell session.

Internet access is needed once the packages are installed.

Python 3.9 or newer is required.

The index is written to `indexes/default`.

Every answer is signed with the maintainers' GPG key and uploaded to a public ledger.

A systemd timer re-indexes the handbook at 02:30 every night.
"""
EXPECTED = {3: "supported", 5: "conflicting", 7: "supported", 9: "conflicting",
            11: "conflicting", 13: "conflicting", 15: "supported", 17: "not_found",
            19: "not_found"}
STAFF_ONLY = 19  # internal/operations.md, visibility: [staff]
TRUE_ONLY = "\n\n".join(DRAFT.split("\n\n")[i] for i in (1, 3, 7)) + "\n"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(docs, index): a copy of corpus/ indexed with the fake embedder, which every call
    in this module also uses."""
    root = tmp_path_factory.mktemp("check")
    docs = root / "docs"
    shutil.copytree(REPO / "corpus", docs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("rag.indexer.embedding.make_embedder", lambda *_a, **_k: FakeEmbedder())
        patch.setenv("XDG_CACHE_HOME", str(root / "cache"))
        build_index(docs, root / "index", Settings(), FakeEmbedder())
        yield docs, root / "index"


def lines_of(docs: Path, path: str, start: int, end: int) -> str:
    return "\n".join((docs / path).read_text(encoding="utf-8").split("\n")[start - 1:end])


def test_each_sentence_of_a_draft_gets_its_status(corpus: tuple[Path, Path]) -> None:
    docs, index = corpus
    checks = rag.check(DRAFT, index=index)
    assert {c.line: c.status for c in checks} == EXPECTED
    by_line = {c.line: c for c in checks}
    for c in checks:
        assert (c.reason == "") == (c.status == "supported")
        assert bool(c.citations) == (c.status != "not_found")
        for cited in c.citations:  # the lines shown are the file's own, where they stand
            assert cited.text == lines_of(docs, cited.source_path, cited.start_line,
                                          cited.end_line)
    port = by_line[5]  # both sides of a conflict are shown: the claim, and what the docs say
    assert "8080" in port.reason and "8000" in port.citations[0].text
    assert "RAG_RETRIEVAL__TOP" in by_line[9].reason
    assert "RAG_RETRIEVAL__K" in by_line[9].citations[0].text
    assert "No internet access" in by_line[11].citations[0].text
    assert "3.11" in by_line[13].citations[0].text
    assert by_line[3].citations[0].source_path == "guide/http-api.md"


def test_a_restricted_file_backs_a_sentence_only_for_its_group(
        corpus: tuple[Path, Path]) -> None:
    _, index = corpus
    staff_only = DRAFT.split("\n\n")[-1]
    [anonymous] = rag.check(staff_only, index=index)
    [other] = rag.check(staff_only, index=index, groups=["sales"])
    [staff] = rag.check(staff_only, index=index, groups=["staff"])
    assert anonymous.status == other.status == "not_found"
    assert "internal/" not in anonymous.reason + other.reason  # not even its name
    assert staff.status == "supported"
    assert staff.citations[0].source_path == "internal/operations.md"


def test_lines_the_file_no_longer_holds_back_nothing(corpus: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    docs, index = corpus
    copy = tmp_path / "docs"
    shutil.copytree(docs, copy)
    path = copy / "guide" / "http-api.md"
    path.write_text(path.read_text(encoding="utf-8").replace("port 8000 by", "port 8001 by"),
                    encoding="utf-8")
    retriever = Pipeline(index, Settings()).retriever
    from rag.verifier.check import check_text

    [c] = check_text(DRAFT.split("\n\n")[1], retriever, copy, threshold=0.6)
    assert c.status == "not_found" and "changed since it was indexed" in c.reason


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_rag_check_prints_each_sentence_and_exits_8_unless_all_are_supported(
        corpus: tuple[Path, Path], tmp_path: Path) -> None:
    _, index = corpus
    draft = tmp_path / "draft.md"
    draft.write_text(DRAFT, encoding="utf-8")
    code, out, err = run("check", str(draft), "--index", str(index), "--json")
    assert code == 8, err
    data = json.loads(out)
    assert list(data) == ["sentences"]
    assert {s["line"]: s["status"] for s in data["sentences"]} == EXPECTED
    assert all({"text", "status", "reason", "citations"} <= set(s) for s in data["sentences"])
    cited = data["sentences"][0]["citations"][0]
    assert set(cited) == {"source_path", "start_line", "end_line", "heading", "text"}

    code, out, _ = run("check", str(draft), "--index", str(index))
    assert code == 8
    assert f"conflicting {draft}:5: The HTTP server listens on port 8080" in out
    assert "guide/http-api.md:" in out and "| The server binds to the loopback" in out
    assert out.rstrip().endswith("3 supported, 4 conflicting, 2 not found")

    true_only = tmp_path / "true.md"
    true_only.write_text(TRUE_ONLY, encoding="utf-8")
    code, out, err = run("check", str(true_only), "--index", str(index))
    assert code == 0, out + err
    assert out.rstrip().endswith("3 supported, 0 conflicting, 0 not found")
    code, out, _ = run("check", str(draft), "--index", str(index), "--groups", "staff",
                       "--json")
    assert code == 8  # the staff-only sentence is supported now, the altered ones are not
    assert {s["line"]: s["status"] for s in json.loads(out)["sentences"]} == {
        **EXPECTED, STAFF_ONLY: "supported"}


@pytest.mark.parametrize("content, why", [
    (None, "no such file"),
    (b"", "is empty"),
    (b"  \n\n", "is empty"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
    (b"caf\xe9 au lait is served hot.\n", "not valid UTF-8"),
    (b"# Only a heading\n\n```\ncode only\n```\n", "no sentence to check"),
])
def test_bad_input_is_one_line_and_exit_2(corpus: tuple[Path, Path], tmp_path: Path,
                                          content: bytes | None, why: str) -> None:
    _, index = corpus
    path = tmp_path / "input.md"
    if content is not None:
        path.write_bytes(content)
    code, out, err = run("check", str(path), "--index", str(index))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and why in err and "Traceback" not in err


def test_a_folder_is_bad_input_too(corpus: tuple[Path, Path], tmp_path: Path) -> None:
    code, _, err = run("check", str(tmp_path), "--index", str(corpus[1]))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "not a regular file" in err


def test_a_text_that_states_nothing_checks_nothing(corpus: tuple[Path, Path]) -> None:
    assert rag.check("# Title\n\nSee below.\n\n```\nrag index\n```\n", index=corpus[1]) == []


@pytest.fixture(scope="module")
def client(corpus: tuple[Path, Path],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict]]:
    docs, index = corpus
    tokens = tmp_path_factory.mktemp("tokens") / "tokens.json"
    headers = {"Authorization": f"Bearer {add_token(tokens, 'ann', ('staff',))}"}
    settings = Settings.model_validate({"server": {"tokens_file": str(tokens),
                                                   "max_check_sentences": 12}})
    application = create_app(index=index, settings=settings, docs=docs,
                             generator="extractive", embedder=FakeEmbedder())
    with TestClient(application, raise_server_exceptions=False,
                    base_url="http://127.0.0.1:8000") as c:
        yield c, headers


def test_http_check_answers_like_the_command(client: tuple[TestClient, dict]) -> None:
    c, staff = client
    body = c.post("/check", json={"text": DRAFT}).json()
    assert body["all_supported"] is False and body["version"]
    assert {s["line"]: s["status"] for s in body["sentences"]} == EXPECTED
    claimed = c.post("/check", json={"text": DRAFT, "groups": ["staff"]}).json()
    assert {s["line"]: s["status"] for s in claimed["sentences"]} == EXPECTED  # not believed
    as_staff = c.post("/check", json={"text": DRAFT}, headers=staff).json()
    assert {s["line"]: s["status"] for s in as_staff["sentences"]}[STAFF_ONLY] == "supported"
    assert c.post("/check", json={"text": TRUE_ONLY}).json()["all_supported"] is True
    nothing = c.post("/check", json={"text": "# Heading only\n"}).json()
    assert nothing["sentences"] == [] and nothing["all_supported"] is False


def test_http_check_refuses_bad_input_in_one_line(client: tuple[TestClient, dict]) -> None:
    c, _ = client
    for body, status, why in [
        ({"text": "   "}, 422, "must not be empty"),
        ({"text": "The port is 8000 here. " * 13}, 422, "at most 12"),
        ({"text": DRAFT, "extra": 1}, 422, "extra"),
    ]:
        response = c.post("/check", json=body)
        assert response.status_code == status, response.text
        assert why in response.json()["error"]
    assert c.post("/check", content="x" * 2_000_000,
                  headers={"Content-Type": "application/json"}).status_code == 413
    schema = c.get("/openapi.json").json()
    assert schema["paths"]["/check"]["post"]["responses"]["200"]["content"][
        "application/json"]["schema"] == {"$ref": "#/components/schemas/CheckOut"}


def test_mcp_check_claims_acts_for_the_servers_groups(corpus: tuple[Path, Path]) -> None:
    docs, index = corpus
    staff_only = DRAFT.split("\n\n")[-1]
    with Pipeline(index, Settings(), generator="extractive") as pipeline:
        anyone = DocsTools(pipeline, docs, Settings(), frozenset()).check_claims(DRAFT)
        staff = DocsTools(pipeline, docs, Settings(), frozenset({"staff"})).check_claims(
            staff_only)
    assert {s["line"]: s["status"] for s in anyone["sentences"]} == EXPECTED
    assert anyone["all_supported"] is False
    assert staff["all_supported"] is True
    assert staff["sentences"][0]["citations"][0]["source_path"] == "internal/operations.md"
