"""A cap on request bodies (`[server] max_body_bytes`), enforced before anything parses them.

A declared Content-Length over the cap is refused at once, before a byte of the body is read;
a body without one (chunked) is counted as it arrives and refused as soon as it passes the
cap. Either way the answer is 413 with the API's one-line error. A body within the cap is read
here and handed on unchanged, so no endpoint ever holds more than the cap in memory.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BODYLESS = ("GET", "HEAD", "OPTIONS")


class _TooLarge(Exception):
    """The body passed the cap while it was being read."""


class _Gone(Exception):
    """The client disconnected before its body had arrived."""


def declared_length(scope: Scope) -> int | None:
    """The request's Content-Length, or None when it sends none (or none that is a number)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:  # the server rejects these; count the bytes regardless
                return None
    return None


async def read_body(receive: Receive, max_bytes: int) -> bytes:
    """The whole body, counted chunk by chunk: _TooLarge the moment it passes ``max_bytes``."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands over the body already read, then the client's later messages
    (the disconnect a streamed answer listens for)."""
    pending = True

    async def replayed() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


class BodyLimit:
    """ASGI middleware: requests that may carry a body get at most ``max_bytes`` of one."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in BODYLESS:
            await self.app(scope, receive, send)
            return
        declared = declared_length(scope)
        try:
            if declared is not None and declared > self.max_bytes:
                raise _TooLarge
            body = await read_body(receive, self.max_bytes)
        except _TooLarge:
            await self.refusal()(scope, receive, send)
            return
        except _Gone:
            return  # nobody to answer
        await self.app(scope, replay(body, receive), send)

    def refusal(self) -> JSONResponse:
        return JSONResponse(
            {"error": f"request body over the {self.max_bytes}-byte limit "
                      "([server] max_body_bytes)"},
            status_code=413, headers={"Connection": "close"})
