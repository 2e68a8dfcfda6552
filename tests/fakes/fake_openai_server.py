"""An OpenAI-compatible HTTP server on 127.0.0.1 that misbehaves on purpose.

Each POST to /v1/chat/completions takes the next scripted Reply (the last one repeats),
so a test can say "429, then a good answer" and check what the client really did.
Every request body is recorded in ``requests``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


@dataclass(frozen=True)
class Reply:
    """One scripted response: an HTTP status, or a completion with this content."""

    content: str = ""
    status: int = 200
    finish_reason: str = "stop"
    delay_s: float = 0.0  # sleep before answering (timeouts)
    raw_body: bytes | None = None  # sent as is instead of a completion
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()  # extra response headers (Retry-After)
    prompt_tokens: int = 11
    completion_tokens: int = 7


def answer_json(statements: list[tuple[str, list[str]]] | list[tuple[str, list[str], str]],
                insufficient: bool = False) -> str:
    """A well-formed answer the way a model would write it: (text, labels[, quote]) each,
    the quote being the text itself when not given."""
    return json.dumps({
        "statements": [{"text": s[0], "evidence": s[1], "quote": s[2] if len(s) > 2 else s[0]}
                       for s in statements],
        "insufficient_evidence": insufficient,
    })


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeOpenAIServer:
    """Context manager: ``with FakeOpenAIServer([Reply(status=429), Reply(ok)]) as srv``."""

    def __init__(self, replies: list[Reply], model: str = "fake-model", port: int = 0) -> None:
        if not replies:
            raise ValueError("at least one reply is needed")
        self.replies = list(replies)
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # lower-cased names, one dict per POST
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,),
                                        daemon=True)  # short poll: quick shutdown

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # wakes handlers that sleep to simulate a timeout
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            index = len(self.requests)
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in headers.items()})
            return self.replies[min(index, len(self.replies) - 1)]

    def _completion(self, reply: Reply) -> bytes:
        return json.dumps({
            "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "finish_reason": reply.finish_reason,
                         "message": {"role": "assistant", "content": reply.content}}],
            "usage": {"prompt_tokens": reply.prompt_tokens,
                      "completion_tokens": reply.completion_tokens,
                      "total_tokens": reply.prompt_tokens + reply.completion_tokens},
        }).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: bytes, reply: Reply | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type",
                                     reply.content_type if reply else "application/json")
                    for name, value in reply.headers if reply else ():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (timeout test)
                    pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    body = {"object": "list", "data": [{"id": fake.model, "object": "model"}]}
                    self._send(200, json.dumps(body).encode())
                else:
                    self._send(404, b'{"error": {"message": "not found"}}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = fake._next_reply(body, dict(self.headers))
                if reply.delay_s and fake._stopping.wait(reply.delay_s):
                    return
                if reply.status != 200:
                    error = {"error": {"message": f"scripted HTTP {reply.status}",
                                       "type": "fake", "code": reply.status}}
                    self._send(reply.status, json.dumps(error).encode(), reply)
                    return
                self._send(200, reply.raw_body or fake._completion(reply), reply)

        return Handler


def main(argv: list[str] | None = None) -> None:
    """Serve good answers citing E1 until killed: a stand-in for the llama.cpp server."""
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake-model")
    args = parser.parse_args(argv)
    reply = Reply(answer_json([("From the fake.", ["E1"])]))
    with FakeOpenAIServer([reply], model=args.model, port=args.port):
        print(f"fake server on {args.port}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
