"""scripts/loadtest.py: loopback only, counts errors, and passes against a real `rag serve`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE_DOCS = REPO / "tests" / "fixtures" / "docs"
SCRIPT = REPO / "scripts" / "loadtest.py"
RAG = [sys.executable, "-c", "from rag.interfaces.cli.main import main; main()"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def run_load(*args: str, timeout: float = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True,
                          text=True, timeout=timeout, env=env or ENV, cwd=REPO)


@pytest.mark.parametrize("url", ["http://192.0.2.7:8000", "http://localhost:8000",
                                 "https://127.0.0.1:8000", "http://127.0.0.1"])
def test_refuses_anything_but_loopback_ip(url):
    done = run_load("--url", url, "--requests", "1", timeout=30)
    assert done.returncode == 2
    assert "--url must be http://127.0.0.1:PORT" in done.stderr
    assert "requests in" not in done.stdout


class _Flaky(BaseHTTPRequestHandler):
    """/health, /search and /index work; /ask answers 503 like a dead model endpoint."""

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path.startswith("/health"):
            self._send(200, {"status": "ok", "chunks": 1, "version": "v-1"})
        else:
            self._send(200, {"query": "q", "version": "v-1", "hits": []})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/ask":
            self._send(503, {"error": "model endpoint is not answering"})
        else:
            self._send(200, {"version": "v-2", "chunks": 1})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_failed_requests_fail_the_run(flaky_server):
    done = run_load("--url", flaky_server, "--requests", "10", "--concurrency", "3",
                    "--max-seconds", "30", timeout=60)
    assert done.returncode == 1, done.stdout
    assert "errors: 5" in done.stdout
    assert "error /ask: HTTP 503 model endpoint is not answering" in done.stdout
    search_row = next(line for line in done.stdout.splitlines() if line.startswith("/search"))
    assert search_row.split()[1:3] == ["5", "0"]  # five searches, none failed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, "rag serve exited early"
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("rag serve did not become healthy")


@pytest.mark.slow
def test_load_against_rag_serve(tmp_path):
    """The real server (ONNX embedder, extractive answers) under load with a re-index."""
    docs, index = tmp_path / "docs", tmp_path / "index"
    shutil.copytree(FIXTURE_DOCS, docs)
    built = subprocess.run([*RAG, "index", str(docs), "--index", str(index)],
                           check=False, capture_output=True, text=True, timeout=300, env=ENV,
                           cwd=REPO)
    assert built.returncode == 0, built.stderr
    config = tmp_path / "rag.toml"  # the re-index needs an API token
    config.write_text(f'[server]\ntokens_file = "{tmp_path / "tokens.json"}"\n', encoding="utf-8")
    added = subprocess.run([*RAG, "token", "add", "load", "--groups", "staff", "--config",
                            str(config)], check=False, capture_output=True, text=True,
                           timeout=60, env=ENV, cwd=REPO)
    assert added.returncode == 0, added.stderr
    port = _free_port()
    with open(tmp_path / "serve.log", "wb") as log:  # the child keeps its own copy
        server = subprocess.Popen(
            [*RAG, "serve", "--index", str(index), "--docs", str(docs), "--port", str(port),
             "--generator", "extractive", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT, env=ENV,
            cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, server, 120)
        done = run_load("--url", url, "--requests", "60", "--concurrency", "4",
                        "--max-seconds", "90", timeout=150,
                        env={**ENV, "RAG_TOKEN": added.stdout.strip()})
        assert done.returncode == 0, done.stdout + done.stderr
        assert "errors: 0" in done.stdout
        rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()
                if line.startswith("/")}
        assert rows["/search"][1:3] == ["30", "0"] and rows["/ask"][1:3] == ["30", "0"]
        assert rows["/index"][1:3] == ["1", "0"]
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    # uvicorn shuts down, then re-raises the SIGTERM it caught
    assert server.returncode in (0, -signal.SIGTERM), (tmp_path / "serve.log").read_text()
