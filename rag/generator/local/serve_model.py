"""`rag serve-model`: keep one local model server running for this user's `rag ask` calls.

The state file (rag.generator.local.model.state_path) records the server's pid and port, this user's
uid and the model settings, so that only matching calls reuse it (find_running_server).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable

from rag.core.errors import GenerationError
from rag.core.paths import make_dir
from rag.generator.local import model as local_model
from rag.generator.local.model import server_key, state_path


def serve_forever(model_path: str, port: int, n_ctx: int, threads: int = 0,
                  on_ready: Callable[[str], None] | None = None) -> None:
    """Run the server for `rag serve-model` until Ctrl-C (or SIGTERM), then clean up."""
    path = state_path()
    main = threading.current_thread() is threading.main_thread()
    # Closing the terminal (SIGHUP) stops it as Ctrl-C does: the child and state file go too.
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    if main:  # SIGTERM stops like Ctrl-C; SIGINT too when a script started us in background
        for sig in stops:
            signal.signal(sig, signal.default_int_handler)
    server = local_model.LocalModelServer(model_path, n_ctx=n_ctx, threads=threads, port=port)
    try:
        with server:
            make_dir(path.parent)
            path.write_text(json.dumps({"pid": server.pid, "port": server.port,
                                        "owner": os.getpid(),
                                        **server_key(model_path, n_ctx, threads)}))
            if on_ready is not None:
                on_ready(server.base_url)
            while server.process is not None and server.process.poll() is None:
                time.sleep(0.5)
            raise GenerationError(f"local model server exited: {server.last_log_line()}")
    except KeyboardInterrupt:
        pass
    finally:
        with contextlib.suppress(OSError, ValueError):
            if json.loads(path.read_text()).get("owner") == os.getpid():
                path.unlink()
        if main:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
