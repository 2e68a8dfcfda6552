"""Several servers over one PostgreSQL index: they follow a re-index made elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rag.core.config import Settings
from rag.indexer.indexing import build_index
from rag.interfaces.http.auth import add_token
from rag.interfaces.http.server import create_app
from rag.stores import postgres
from tests.test_loadtest import ENV, _free_port, _wait_healthy, run_load

REPO = Path(__file__).resolve().parents[1]
RAG = [sys.executable, "-c", "from rag.interfaces.cli.main import main; main()"]
TIDES = "How often do the tides come?"


def pg_settings(dsn: str) -> Settings:
    settings = Settings()
    settings.store.kind = "postgres"
    settings.store.dsn = dsn
    return settings


def test_two_servers_follow_a_reindex_made_elsewhere(docs, pg_dsn, embedder, monkeypatch):
    settings = pg_settings(pg_dsn)
    build_index(docs, Path("unused"), settings, embedder)
    monkeypatch.setattr(postgres, "STALE_CHECK_S", 0.0)
    apps = [create_app(index=Path("unused"), settings=settings, docs=docs,
                       generator="extractive", embedder=embedder) for _ in range(2)]
    loopback = "http://127.0.0.1:8000"  # the Host allow-list refuses testserver
    with TestClient(apps[0], base_url=loopback) as a, \
            TestClient(apps[1], base_url=loopback) as b:
        before = {c.get("/health").json()["version"] for c in (a, b)}
        assert len(before) == 1
        old = before.pop()
        (docs / "tides.md").write_text("# Tides\n\nThe tides come twice a day.\n",
                                       encoding="utf-8")
        report = build_index(docs, Path("unused"), settings, embedder)  # another process
        for client in (a, b):
            body = client.get("/search", params={"q": TIDES, "k": 3}).json()
            assert body["version"] == report.version != old
            assert body["hits"][0]["source_path"] == "tides.md"
            answer = client.post("/ask", json={"question": TIDES}).json()
            assert answer["index_version"] == report.version
            assert [c["source_path"] for c in answer["citations"]] == ["tides.md"]
            assert "The tides come twice a day." in [
                line["text"] for line in answer["citations"][0]["lines"]]


def _serve(docs: Path, dsn: str, log: Path,
           tokens: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
           "RAG_STORE__KIND": "postgres", "RAG_STORE__DSN": dsn}
    if tokens is not None:
        env["RAG_SERVER__TOKENS_FILE"] = str(tokens)
    with open(log, "wb") as out:
        proc = subprocess.Popen([*RAG, "serve", "--docs", str(docs), "--port", str(port),
                                 "--generator", "extractive"], stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=REPO)
    return proc, f"http://127.0.0.1:{port}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.slow
def test_load_on_two_servers_while_a_third_is_killed(docs, pg_dsn, tmp_path):
    """Real `rag serve` processes (ONNX embedder, extractive answers) on one database."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAG_STORE__KIND": "postgres",
           "RAG_STORE__DSN": pg_dsn}
    built = subprocess.run([*RAG, "index", str(docs)], check=False, capture_output=True,
                           text=True, timeout=300, env=env, cwd=REPO)
    assert built.returncode == 0, built.stderr
    tokens = tmp_path / "tokens.json"  # POST /index needs a token
    token_env = {**ENV, "RAG_TOKEN": add_token(tokens, "loader", ())}
    servers = [_serve(docs, pg_dsn, tmp_path / f"serve-{n}.log", tokens) for n in range(3)]
    try:
        for proc, url in servers:
            _wait_healthy(url, proc, 120)
        victim, victim_url = servers[2]

        def kill_mid_request() -> None:
            request = urllib.request.Request(
                victim_url + "/ask", data=b'{"question": "Which port is the default?"}',
                method="POST", headers={"Content-Type": "application/json"})
            threading.Timer(0.05, victim.send_signal, (signal.SIGKILL,)).start()
            try:
                urllib.request.urlopen(request, timeout=30).read()
            except OSError:
                pass  # the killed server's own client fails; nobody else may

        results: dict[str, subprocess.CompletedProcess[str]] = {}

        def load(name: str, url: str, *extra: str) -> None:
            results[name] = run_load("--url", url, "--requests", "40", "--concurrency", "4",
                                     "--max-seconds", "120", *extra, timeout=180,
                                     env=token_env)

        threads = [threading.Thread(target=load, args=("a", servers[0][1])),  # re-indexes
                   threading.Thread(target=load, args=("b", servers[1][1], "--no-reindex")),
                   threading.Thread(target=kill_mid_request)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(200)
        assert victim.wait(10) == -signal.SIGKILL
        for name in ("a", "b"):
            assert results[name].returncode == 0, results[name].stdout + results[name].stderr
            assert "errors: 0" in results[name].stdout
        new = [line.split()[-1] for line in results["a"].stdout.splitlines()
               if line.startswith("/index")]
        assert new == ["1"]  # one re-index, one version it reported
        deadline = time.monotonic() + 10  # server b follows within a second or so
        versions: set[str] = set()
        while time.monotonic() < deadline:
            versions = set()
            for _, url in servers[:2]:
                with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                    versions.add(resp.read().decode())
            if len(versions) == 1:
                break
            time.sleep(0.2)
        assert len(versions) == 1, versions
    finally:
        for proc, _ in servers:
            _stop(proc)
