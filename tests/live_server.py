"""The app behind a real uvicorn on a loopback port, in a thread, for tests that need sockets.

TestClient buffers whole requests and responses, so it can neither hang up mid-stream nor
send a body slowly; a real server and raw sockets do exactly what a client on the network does.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(app: Any, port: int) -> Iterator[uvicorn.Server]:
    """Serve ``app`` on 127.0.0.1:``port`` until the block ends (lifespan included)."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on",
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(30)


def post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> socket.socket:
    """A socket that has sent one POST (Content-Length set unless ``headers`` names one)."""
    fields = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json",
              "Connection": "close", **(headers or {})}
    if "Content-Length" not in fields and "Transfer-Encoding" not in fields:
        fields["Content-Length"] = str(len(body))
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    sock.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode() + body)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    out = bytearray()
    with sock:
        while chunk := sock.recv(65536):
            out += chunk
    return bytes(out)


def status_and_body(raw: bytes) -> tuple[int, bytes]:
    """The status code and the (de-chunked) body of one raw HTTP/1.1 response."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" not in head.lower():
        return status, body
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return status, bytes(out)
