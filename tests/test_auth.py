"""Who the server takes the asker for: tokens, a trusted proxy, Host and cross-site checks.

Each of these was a finding of a security review: the server believed the groups a request
claimed (15), answered any Host header so a DNS-rebinding page could read it (8), and let a
cross-site form POST start a re-index (10).
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from rag.core.config import Settings
from rag.indexer import indexing
from rag.indexer.embedding import FakeEmbedder
from rag.indexer.indexing import build_index
from rag.interfaces.cli.main import app as cli
from rag.interfaces.http.auth import read_tokens, remove_token, token_hash
from rag.interfaces.http.server import create_app
from tests.test_server import TOKEN_QUESTION, with_tokens

STAFF_QUERY = "rotate admin token vault"
RUNBOOK = "staff/runbook.md"
PROXY = "10.0.0.5"


def served(docs: Path, tmp_path: Path, settings: Settings, *, peer: str = "127.0.0.1",
           base_url: str = "http://127.0.0.1:8000", **options: object) -> TestClient:
    embedder = FakeEmbedder()
    if not (tmp_path / "index").exists():
        build_index(docs, tmp_path / "index", settings, embedder)
    app = create_app(index=tmp_path / "index", settings=settings, docs=docs,
                     generator="extractive", embedder=embedder, **options)  # type: ignore
    return TestClient(app, raise_server_exceptions=False, base_url=base_url,
                      client=(peer, 50000))


@pytest.fixture
def tokens(settings, tmp_path) -> tuple[Settings, dict[str, dict]]:
    proxied = settings.model_copy(update={"server": settings.server.model_copy(
        update={"trusted_proxies": [PROXY]})})
    return with_tokens(proxied, tmp_path)


@pytest.fixture
def client(docs, tmp_path, tokens) -> Iterator[TestClient]:
    with served(docs, tmp_path, tokens[0]) as c:
        yield c


def search_paths(client: TestClient, headers: dict | None = None, groups: str = "") -> set[str]:
    resp = client.get("/search", params={"q": STAFF_QUERY, "k": 50, "groups": groups},
                      headers=headers or {})
    assert resp.status_code == 200, resp.text
    return {h["source_path"] for h in resp.json()["hits"]}


def ask_text(client: TestClient, headers: dict | None = None, **extra: object) -> str:
    resp = client.post("/ask", json={"question": TOKEN_QUESTION, **extra}, headers=headers or {})
    assert resp.status_code == 200, resp.text
    # Timings are numbers the server measured: "4242" can turn up in one by chance.
    return json.dumps({k: v for k, v in resp.json().items() if k != "timings"})


# --- finding 15: the groups a request claims ---------------------------------------------


@pytest.mark.parametrize("claimed", ["staff", "staff,sales", " staff "])
def test_anonymous_request_sees_public_docs_whatever_groups_it_claims(client, claimed):
    assert RUNBOOK not in search_paths(client, groups=claimed)
    body = ask_text(client, groups=[g for g in claimed.split(",")])
    assert RUNBOOK not in body and "4242" not in body


def test_a_tokens_groups_apply_and_claims_do_not_widen_them(client, tokens):
    user = tokens[1]
    assert RUNBOOK in search_paths(client, user["ann"])
    assert RUNBOOK in ask_text(client, user["ann"])
    # bob (sales) claims staff in the query and in the body: still no staff docs
    assert RUNBOOK not in search_paths(client, user["bob"], groups="staff")
    assert RUNBOOK not in ask_text(client, user["bob"], groups=["staff"])


@pytest.mark.parametrize("authorization, error", [
    ("Bearer rag_not-a-real-token", "unknown or revoked API token"),
    ("Basic YW5uOnB3", "the Authorization header must be `Bearer <token>`"),
    ("Bearer ", "the Authorization header must be `Bearer <token>`"),
])
def test_a_bad_token_is_refused_not_taken_for_anonymous(client, authorization, error):
    for resp in (client.get("/search", params={"q": "ports"},
                            headers={"Authorization": authorization}),
                 client.post("/ask", json={"question": "ports?"},
                             headers={"Authorization": authorization}),
                 client.get("/health", headers={"Authorization": authorization})):
        assert resp.status_code == 401
        assert resp.json() == {"error": error}
        assert resp.headers["www-authenticate"].startswith("Bearer")


def test_a_removed_token_stops_working_on_the_next_request(client, tokens):
    settings, user = tokens
    assert client.get("/health", headers=user["ann"]).json()["user"] == "ann"
    remove_token(Path(settings.server.tokens_file), "ann")
    assert client.get("/health", headers=user["ann"]).status_code == 401
    assert client.get("/health", headers=user["bob"]).json()["user"] == "bob"


def test_a_damaged_tokens_file_refuses_every_token(client, tokens):
    settings, user = tokens
    Path(settings.server.tokens_file).write_text("{not json", encoding="utf-8")
    assert client.get("/health", headers=user["ann"]).status_code == 401
    assert client.get("/health").json()["user"] is None  # anonymous still sees public docs


def test_tokens_are_refused_when_the_server_has_no_tokens_file(docs, tmp_path, tokens):
    with served(docs, tmp_path, Settings()) as c:
        resp = c.get("/health", headers=tokens[1]["ann"])
    assert resp.status_code == 401
    assert resp.json() == {"error": "this server accepts no API tokens"}


def test_the_dev_flag_believes_claimed_groups(docs, tmp_path, tokens):
    with served(docs, tmp_path, tokens[0], trust_claimed_groups=True) as c:
        assert c.get("/health").json()["claimed_groups"] is True
        assert RUNBOOK in search_paths(c, groups="sales,staff")
        assert RUNBOOK in ask_text(c, groups=["staff"])
        assert RUNBOOK not in search_paths(c, groups="sales")
        # a token still decides for its own user
        assert RUNBOOK not in search_paths(c, tokens[1]["bob"], groups="staff")


# --- an authenticating proxy ---------------------------------------------------------------


def test_identity_headers_count_only_from_a_trusted_proxy(docs, tmp_path, tokens):
    headers = {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "sales, staff"}
    with served(docs, tmp_path, tokens[0], peer=PROXY) as via_proxy:
        assert via_proxy.get("/health", headers=headers).json()["user"] == "carol"
        assert RUNBOOK in search_paths(via_proxy, headers)
        assert RUNBOOK not in search_paths(via_proxy, {"X-Forwarded-User": "dave"})
        assert RUNBOOK not in search_paths(via_proxy)  # no user header: anonymous
    with served(docs, tmp_path, tokens[0], peer="10.0.0.6") as direct:
        resp = direct.get("/search", params={"q": STAFF_QUERY}, headers=headers)
    assert resp.status_code == 401
    assert "only accepted from the addresses in [server] trusted_proxies" in resp.json()["error"]


def test_proxy_header_names_are_configurable(docs, tmp_path, tokens):
    server = tokens[0].server.model_copy(update={"user_header": "Remote-User",
                                                 "groups_header": "Remote-Groups"})
    settings = tokens[0].model_copy(update={"server": server})
    with served(docs, tmp_path, settings, peer=PROXY) as c:
        assert RUNBOOK in search_paths(c, {"Remote-User": "carol", "Remote-Groups": "staff"})
        assert c.get("/health", headers={"X-Forwarded-User": "carol"}).json()["user"] is None


# --- finding 8: DNS rebinding --------------------------------------------------------------


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.nip.io:8000",
                                  "localhost.evil.example", ""])
def test_a_foreign_host_header_is_refused(client, host):
    resp = client.get("/search", params={"q": STAFF_QUERY}, headers={"Host": host})
    assert resp.status_code == 421
    assert "allowed_hosts" in resp.json()["error"]
    assert client.get("/", headers={"Host": host}).status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LOCALHOST:8000",
                                  "[::1]:8000"])
def test_loopback_names_are_served_on_the_serving_port(docs, tmp_path, host):
    with served(docs, tmp_path, Settings(), port=8000) as c:
        assert c.get("/health", headers={"Host": host}).status_code == 200
        assert c.get("/health", headers={"Host": host.replace("8000", "9000")}).status_code == 421


def test_allowed_hosts_from_the_config(docs, tmp_path):
    settings = Settings.model_validate({"server": {"allowed_hosts": ["docs.example.com"]}})
    with served(docs, tmp_path, settings, base_url="https://docs.example.com") as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health", headers={"Host": "localhost:8000"}).status_code == 421


# --- finding 10: cross-site writes ---------------------------------------------------------


@pytest.fixture
def reindex_calls(monkeypatch) -> list[object]:
    calls: list[object] = []
    real = indexing.build_index

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(indexing, "build_index", counted)
    return calls


@pytest.mark.parametrize("content_type, body", [
    ("application/x-www-form-urlencoded", ""),
    ("application/x-www-form-urlencoded", "rebuild=true"),
    ("text/plain", ""),
    ("text/plain", '{"rebuild": true}'),
    ("multipart/form-data; boundary=x", "--x--\r\n"),
    (None, ""),
])
def test_a_form_or_text_post_to_index_is_refused(client, tokens, reindex_calls,
                                                 content_type, body):
    before = client.get("/health").json()["version"]
    headers = dict(tokens[1]["ann"])  # even with a token: a form is not how the API is used
    if content_type:
        headers["Content-Type"] = content_type
    resp = client.post("/index", content=body, headers=headers)
    assert resp.status_code == 415
    assert resp.json() == {"error": "POST needs a JSON body (Content-Type: application/json)"}
    assert reindex_calls == [] and client.get("/health").json()["version"] == before


def test_a_cross_site_form_post_is_refused_before_it_reaches_the_index(client, reindex_calls):
    # What a hostile page's <form method=post action=http://127.0.0.1:8000/index> sends.
    resp = client.post("/index", content="", headers={
        "Content-Type": "application/x-www-form-urlencoded",
        "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert resp.status_code == 403 and resp.json() == {"error": "cross-origin request refused"}
    assert reindex_calls == []


def test_reindex_needs_a_token(client, tokens, reindex_calls):
    resp = client.post("/index", json={})
    assert resp.status_code == 401
    assert resp.json() == {"error": "POST /index needs an API token"}
    assert reindex_calls == []
    same_origin = {**tokens[1]["ann"], "Origin": "http://127.0.0.1:8000"}
    assert client.post("/index", json={}, headers=same_origin).status_code == 200
    assert len(reindex_calls) == 1


# --- the tokens file and `rag token` ---------------------------------------------------------


def _config(tmp_path: Path, tokens_file: Path) -> Path:
    config = tmp_path / "rag.toml"
    config.write_text(f'[server]\ntokens_file = "{tokens_file}"\n', encoding="utf-8")
    return config


def test_rag_token_add_list_remove(tmp_path):
    path = tmp_path / "secrets" / "tokens.json"
    config = str(_config(tmp_path, path))
    runner = CliRunner()
    added = runner.invoke(cli, ["token", "add", "ann", "--groups", "staff, ops",
                                "--config", config])
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert token.startswith("rag_") and len(token) > 40
    assert "shown once" in added.stderr
    # stored hashed, owner-only, never in clear
    text = path.read_text(encoding="utf-8")
    assert token not in text and token_hash(token) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [(e.name, e.groups) for e in read_tokens(path)] == [("ann", ("ops", "staff"))]

    again = runner.invoke(cli, ["token", "add", "ann", "--config", config])
    assert again.exit_code == 4 and "ann already has a token" in again.stderr
    listed = runner.invoke(cli, ["token", "list", "--json", "--config", config])
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["ann"]
    assert token not in listed.stdout and token_hash(token) not in listed.stdout

    removed = runner.invoke(cli, ["token", "remove", "ann", "--config", config])
    assert removed.exit_code == 0 and read_tokens(path) == []
    gone = runner.invoke(cli, ["token", "remove", "ann", "--config", config])
    assert gone.exit_code == 4 and gone.stderr.count("\n") == 1


def test_rag_token_needs_a_tokens_file_in_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["token", "add", "ann"])
    assert result.exit_code == 4
    assert result.stderr == ("error: no tokens file: set [server] tokens_file in the config "
                             "(or RAG_SERVER__TOKENS_FILE)\n")


def test_rag_serve_warns_about_the_dev_flag_and_ignores_forwarded_for(docs, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr("rag.indexer.embedding.make_embedder", lambda _settings, **_: FakeEmbedder())
    build_index(docs, tmp_path / "index", Settings(), FakeEmbedder())
    ran: dict = {}
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: ran.update(kwargs))
    result = CliRunner().invoke(cli, ["serve", "--index", str(tmp_path / "index"), "--docs",
                                      str(docs), "--generator", "extractive",
                                      "--dev-trust-claimed-groups"])
    assert result.exit_code == 0, result.output
    assert "warning: --dev-trust-claimed-groups" in result.stderr
    assert ran["proxy_headers"] is False  # X-Forwarded-For never replaces the peer address
