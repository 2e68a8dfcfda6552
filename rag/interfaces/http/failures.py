"""How `rag serve` fails: a domain error, a bad request or a crash as one JSON line,
``{"error": "..."}``, with the HTTP status that says whose fault it was."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from rag.core import errors
from rag.interfaces.http.api import NOT_BLANK

log = logging.getLogger("rag.server")


def status_for(exc: errors.RagError) -> int:
    """HTTP status of a domain error: bad input 400 or 422, model endpoint 503, the rest 500."""
    if isinstance(exc, errors.GenerationError):
        return 503
    if isinstance(exc, errors.AccessError):
        return 403
    if isinstance(exc, errors.ConfigError | errors.RetrievalError):
        return 400
    if isinstance(exc, errors.UsageError):
        return 422
    if isinstance(exc, errors.IndexBusyError):
        return 409
    return 500


def _validation_message(exc: RequestValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "query"))
    msg = str(err.get("msg", "invalid request")).removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    if (err.get("type"), ctx.get("pattern"), ctx.get("min_length")) in (
            ("string_pattern_mismatch", NOT_BLANK, None), ("string_too_short", None, 1)):
        msg = "must not be empty"
    return f"{where}: {msg}" if where else msg


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(errors.RagError)
    async def rag_error(_: Request, exc: errors.RagError) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=status_for(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": _validation_message(exc)}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error: %r", exc, exc_info=exc)  # the log has it, the client not
        return JSONResponse({"error": "internal error; the server log has the details"},
                            status_code=500)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)
