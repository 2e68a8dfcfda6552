"""`rag verify` and `POST /verify`: a saved answer's citations against the docs as they are now."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from rag.core.config import Settings
from rag.indexer import embedding
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.interfaces.cli.main import app
from rag.interfaces.http.auth import add_token
from rag.interfaces.http.server import create_app
from rag.verifier.reverify import locate

QUESTION = "Which port does the HTTP API listen on by default?"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def read(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n").split("\n")


def write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.fixture
def saved(docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`rag ask --json` output saved to a file (fake embedder, extractive generator)."""
    monkeypatch.setattr(embedding, "make_embedder", lambda *a, **k: FakeEmbedder())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    code, out, err = run("ask", QUESTION, "--docs", str(docs), "--generator", "extractive",
                         "--json")
    assert code == 0, err
    path = tmp_path / "answer.json"
    path.write_text(out, encoding="utf-8")
    return path


def first(saved: Path) -> dict:
    return json.loads(saved.read_text(encoding="utf-8"))["citations"][0]


def verify(saved: Path, *extra: str) -> tuple[int, dict]:
    code, out, err = run("verify", str(saved), "--json", *extra)
    assert "Traceback" not in err
    return code, json.loads(out)


def test_saved_citations_carry_the_text_they_cite(saved: Path, docs: Path):
    data = json.loads(saved.read_text(encoding="utf-8"))
    assert data["citations"]
    for c in data["citations"]:
        lines = read(docs / c["source_path"])
        assert "\n".join(lines[c["start_line"] - 1:c["end_line"]]) == c["text"]


def test_unchanged_docs_are_exact(saved: Path):
    code, out, _ = run("verify", str(saved))
    assert code == 0
    assert out.splitlines() and all(" exact " in line for line in out.splitlines())


def test_lines_inserted_above_make_a_citation_moved(saved: Path, docs: Path):
    c = first(saved)
    path = docs / c["source_path"]
    write(path, ["Note added later.", ""] + read(path))
    code, report = verify(saved)
    row = next(r for r in report["citations"] if r["label"] == c["label"])
    assert code == 8 and not report["all_exact"]
    assert row["status"] == "moved"
    assert (row["new_start_line"], row["new_end_line"]) == (c["start_line"] + 2,
                                                            c["end_line"] + 2)


def test_an_edit_inside_the_range_makes_it_changed(saved: Path, docs: Path):
    c = first(saved)
    path = docs / c["source_path"]
    lines = read(path)
    lines[c["end_line"] - 1] += " (edited)"
    write(path, lines)
    code, report = verify(saved)
    row = next(r for r in report["citations"] if r["label"] == c["label"])
    assert code == 8 and row["status"] == "changed" and row["new_start_line"] is None


def test_a_removed_file_is_gone(saved: Path, docs: Path):
    c = first(saved)
    (docs / c["source_path"]).unlink()
    code, out, _ = run("verify", str(saved))
    assert code == 8
    assert f"[{c['label']}] gone    {c['source_path']}:" in out


def test_docs_option_points_at_another_copy(saved: Path, docs: Path, tmp_path: Path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(docs, copy)
    (docs / first(saved)["source_path"]).unlink()
    assert run("verify", str(saved))[0] == 8
    assert run("verify", str(saved), "--docs", str(copy))[0] == 0


def test_a_line_precise_citation_is_checked_line_for_line(tmp_path: Path):
    lines = ["# Title", "", "alpha", "beta", "gamma", "delta"]
    assert locate(lines, 4, 5, "beta\ngamma") == ("exact", 4, 5)
    edited = ["# Title", "", "alpha changed", "beta", "gamma", "delta"]
    assert locate(edited, 4, 5, "beta\ngamma") == ("exact", 4, 5)  # chunk changed, lines not
    assert locate(["new", *lines], 4, 5, "beta\ngamma") == ("moved", 5, 6)
    assert locate(lines, 4, 5, "beta\nGAMMA") == ("changed", 4, 5)
    assert locate(None, 4, 5, "beta") == ("gone", 4, 5)


def test_bad_input_is_one_line(saved: Path, tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    code, _, err = run("verify", str(bad))
    assert code == 3 and "not a readable JSON answer" in err and err.count("\n") == 1
    data = json.loads(saved.read_text(encoding="utf-8"))
    data["citations"][0]["source_path"] = "../outside.md"  # names no docs file: gone
    bad.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = run("verify", str(bad))
    assert code == 8 and "gone" in out and "Traceback" not in err


def test_rag_verify_does_not_follow_the_answers_docs_root(saved: Path, tmp_path: Path):
    import os

    data = json.loads(saved.read_text(encoding="utf-8"))
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mkfifo(dev / "pipe.md")
    (dev / "zero.md").symlink_to("/dev/zero")
    data["docs_root"] = str(dev)
    data["citations"] = [{**data["citations"][0], "source_path": p}
                         for p in ("pipe.md", "zero.md")]
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data), encoding="utf-8")
    for extra in (("--docs", str(dev)), ()):  # named, or only in the answer: never read
        code, out, err = run("verify", str(forged), *extra)
        assert code == 8 and "pipe.md" in out and "zero.md" in out and not err
        assert {line.split()[1] for line in out.splitlines()} == {"gone"}


def test_rag_verify_shows_hostile_labels_and_paths_escaped(saved: Path, tmp_path: Path):
    data = json.loads(saved.read_text(encoding="utf-8"))
    data["citations"][0]["label"] = "E1\x1b]0;owned\x07\u202e"
    data["citations"][0]["source_path"] = "a\x1b[2Jb.md"
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data), encoding="utf-8")
    for extra in ((), ("--json",)):
        _, out, _ = run("verify", str(forged), *extra)
        assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out


STAFF: dict[str, str] = {}


@pytest.fixture
def client(docs: Path, tmp_path: Path, settings: Settings, embedder: FakeEmbedder):
    tokens = tmp_path / "tokens.json"
    STAFF["Authorization"] = f"Bearer {add_token(tokens, 'ann', ('staff',))}"
    settings = settings.model_copy(update={"server": settings.server.model_copy(
        update={"tokens_file": str(tokens)})})
    build_index(docs, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder)
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1:8000") as c:
        yield c


def test_http_verify_reports_exact_then_moved(client: TestClient, docs: Path):
    answer = client.post("/ask", json={"question": QUESTION}).json()
    assert answer["citations"]
    resp = client.post("/verify", json={"answer": answer})
    assert resp.status_code == 200 and resp.json()["all_exact"]
    c = answer["citations"][0]
    path = docs / c["source_path"]
    write(path, ["moved down", *read(path)])
    body = client.post("/verify", json={"answer": answer}).json()
    row = next(r for r in body["citations"] if r["label"] == c["label"])
    assert not body["all_exact"] and row["status"] == "moved"
    assert row["new_start_line"] == c["start_line"] + 1


def _forged(path: str, text: str, start: int = 1) -> dict:
    return {"citations": [{"label": "E1", "source_path": path, "start_line": start,
                           "end_line": start + text.count("\n"), "text": text}]}


def _status(client: TestClient, answer: dict, **kw) -> list[tuple[str, str | None]]:
    resp = client.post("/verify", json={"answer": answer}, **kw)
    assert resp.status_code == 200, resp.text
    return [(r["status"], r["new_start_line"]) for r in resp.json()["citations"]]


def test_http_verify_answers_a_restricted_file_as_a_missing_one(client: TestClient):
    question = "How is the admin token rotated and where is it stored?"
    answer = client.post("/ask", json={"question": question}, headers=STAFF).json()
    cited = [c for c in answer["citations"] if c["source_path"] == "staff/runbook.md"]
    assert cited
    assert client.post("/verify", json={"answer": answer}, headers=STAFF).json()["all_exact"]
    runbook = {"citations": cited}
    missing = {"citations": [{**c, "source_path": "staff/nothing-here.md"} for c in cited]}
    # Anonymous, or claiming a group it has no token for: exactly what a missing file gets.
    for groups in ([], ["staff"]):
        got = client.post("/verify", json={"answer": runbook, "groups": groups})
        assert got.status_code == 200 and "docs" not in got.text.replace(
            "staff/runbook.md", "")  # no server path in the reply
        assert _status(client, runbook) == _status(client, missing) == [("gone", None)] * len(
            cited)
    for path in (".hidden/notes.md", "settings.toml"):  # files that are not docs sources
        (docs_dir(client) / path).parent.mkdir(exist_ok=True)
        (docs_dir(client) / path).write_text("secret = 1\n", encoding="utf-8")
        assert _status(client, _forged(path, "secret = 1")) == [("gone", None)]


def test_http_verify_aliases_of_a_restricted_file_are_missing_files(client: TestClient):
    docs = docs_dir(client)
    secret = "Internal procedures for the Tidewatch operations team. Do not share outside " \
        "the company."
    line = read(docs / "staff/runbook.md").index(secret) + 1
    (docs / "public").mkdir()
    (docs / "public/link.md").symlink_to(docs / "staff/runbook.md")
    (docs / "public/hard.md").hardlink_to(docs / "staff/runbook.md")
    for alias in ("staff\\runbook.md", "staff//runbook.md", "./staff/runbook.md",
                  "staff/./runbook.md", "public/link.md", "public/hard.md"):
        assert _status(client, _forged(alias, secret, line)) == [("gone", None)], alias
        assert _status(client, _forged(alias, "a guess", line)) == [("gone", None)], alias
    # With the token the spelling variants name the indexed file; links never do.
    assert _status(client, _forged("staff//runbook.md", secret, line), headers=STAFF) == [
        ("exact", None)]
    assert _status(client, _forged("public/link.md", secret, line), headers=STAFF) == [
        ("gone", None)]


def test_http_verify_never_waits_on_a_fifo(client: TestClient, tmp_path: Path):
    import os
    import threading

    docs = docs_dir(client)
    target = docs / "faq.md"
    target.unlink()
    os.mkfifo(target)  # an indexed Source replaced by a FIFO
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(
        _status(client, _forged("faq.md", "anything"))), daemon=True)
    worker.start()
    worker.join(10)
    assert result == [[("gone", None)]]


def docs_dir(client: TestClient) -> Path:
    return Path(client.app.state.rag.docs)  # type: ignore[attr-defined]


def test_http_verify_refuses_what_is_not_an_answer(client: TestClient):
    resp = client.post("/verify", json={"answer": {"no": "citations"}})
    assert resp.status_code == 422 and "no `citations` list" in resp.json()["error"]
    resp = client.post("/verify", json={"answer": {"citations": [{"label": "E1"}]}})
    assert resp.status_code == 422 and "lacks source_path" in resp.json()["error"]


def test_http_verify_answers_a_path_with_a_nul_byte_with_an_error_not_a_crash(
        client: TestClient):
    # Found by the API fuzzer: a NUL byte in a cited path made the path check itself fail.
    for path in ("guide\x00.md", "a\nb.md"):
        forged = {"citations": [{"label": "E1", "source_path": path, "start_line": 1,
                                 "end_line": 1, "text": "x"}]}
        resp = client.post("/verify", json={"answer": forged})
        assert 400 <= resp.status_code < 500, resp.text


def _many(n: int) -> list[dict]:
    return [{"label": f"E{i}", "source_path": "faq.md", "start_line": i + 1,
             "end_line": i + 1, "text": "x"} for i in range(n)]


def test_http_verify_refuses_more_citations_than_the_cap_in_one_line(client: TestClient):
    """Anonymous callers once made the server check thousands of citations per request."""
    cap = Settings().server.max_verify_citations
    assert client.post("/verify", json={"answer": {"citations": _many(cap)}}).status_code == 200
    message = f"the answer names {cap + 1} citations; POST /verify checks at most {cap} " \
        "([server] max_verify_citations)"
    over = client.post("/verify", json={"answer": {"citations": _many(cap + 1)}})
    assert (over.status_code, over.json()) == (422, {"error": message})
    # the statements' citations count too
    split = {"citations": _many(cap // 2),
             "statements": [{"text": "s", "citations": _many(cap // 2 + 1)}]}
    resp = client.post("/verify", json={"answer": split})
    assert (resp.status_code, resp.json()) == (422, {"error": message})


def test_the_schema_states_the_configured_citation_cap(docs: Path, tmp_path: Path,
                                                      embedder: FakeEmbedder):
    settings = Settings.model_validate({"server": {"max_verify_citations": 7}})
    build_index(docs, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder)
    with TestClient(app, base_url="http://127.0.0.1:8000") as c:
        answer = c.get("/openapi.json").json()["components"]["schemas"]["VerifyRequest"][
            "properties"]["answer"]
        assert answer["properties"]["citations"]["maxItems"] == 7
        statement = answer["properties"]["statements"]["items"]
        assert statement["properties"]["citations"]["maxItems"] == 7
        assert "At most 7 citations in all" in answer["description"]
        assert c.post("/verify", json={"answer": {"citations": _many(8)}}).status_code == 422


def test_malformed_saved_answers_are_one_line_not_a_crash(client: TestClient, saved: Path,
                                                          tmp_path: Path):
    good = json.loads(saved.read_text(encoding="utf-8"))
    c = good["citations"][0]
    bad_answers = [
        {"citations": [{**c, "start_line": float("inf")}]},
        {"citations": [{k: v for k, v in c.items() if k != "text"} | {"lines": ["a"]}]},
        {"citations": [c], "statements": 5},
        {"citations": [c], "statements": ["a statement as a bare string"]},
        {"citations": [{**c, "text": 5}]},
        # found by the API fuzzer: null where the schema says a list was read as empty
        {"citations": [c], "statements": None},
        {"citations": [c], "statements": [{"text": "s", "citations": None}]},
    ]
    for answer in bad_answers:
        body = json.dumps({"answer": answer}).replace("Infinity", "1e999")
        resp = client.post("/verify", content=body, headers={"Content-Type": "application/json"})
        assert resp.status_code == 422 and set(resp.json()) == {"error"}, resp.text
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(answer), encoding="utf-8")
        code, _, err = run("verify", str(path))
        assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
