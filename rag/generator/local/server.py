"""The local model server process: llama.cpp's C++ server from the prebuilt xllamacpp wheel.

Started by rag.generator.local.model as ``python -m rag.generator.local.server --model ... --port ...``; it
imports nothing from rag, loads the GGUF, serves the OpenAI-compatible API on the loopback
port it is given and runs until a signal ends it. A failure to start is one line on stderr
(the parent reports the last line of the child's output).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

HOST = "127.0.0.1"


def main(argv: Sequence[str]) -> int:
    """The server process: load the model, serve until a signal ends the process."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m rag.generator.local.server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--n-ctx", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        import xllamacpp as xlc
    except ImportError as exc:
        print(f"error: cannot import xllamacpp ({exc})", file=sys.stderr, flush=True)
        return 1
    params = xlc.CommonParams()
    params.model.path = args.model
    params.model_alias = {args.alias}
    params.n_ctx = args.n_ctx
    params.n_parallel = 1  # one request at a time: all threads on it
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = args.threads
    # DRY penalises a token that would extend a run repeated within the last 64 tokens:
    # small models otherwise loop ("1.1.1.1...", the same clause again) until max_tokens.
    params.sampling.dry_multiplier = 0.8
    params.hostnames = [args.host]
    params.port = args.port
    params.ui = False
    params.endpoint_slots = False
    params.cors_origins = f"http://{args.host}:{args.port}"  # no other web page may read it
    params.cache_ram_mib = 64  # prompts differ every question; no gigabytes of cache
    params.verbosity = 2  # warnings and errors only; the log is read on failure
    try:
        server = xlc.Server(params)
    except RuntimeError:  # its reason is in the log lines above; this one sums it up
        print(f"error: llama.cpp could not load {args.model} or listen on port {args.port}",
              file=sys.stderr, flush=True)
        return 1
    print(f"serving {server.listening_address}", file=sys.stderr, flush=True)
    while True:  # the C++ server runs on its own threads; SIGTERM/SIGKILL end the process
        signal.pause()


if __name__ == "__main__":  # pragma: no cover - the child process
    sys.exit(main(sys.argv[1:]))
