"""The service's errors, in one JSON shape (``limits.error_body``), naming the field that is wrong."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dreaming_dagster.service.limits import error_body
from dreaming_dagster.storage.records import InvalidInputError


class ServiceError(Exception):
    def __init__(self, status: int, code: str, message: str, field_name: str | None = None,
                 headers: dict[str, str] | None = None, **extra: Any):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field_name
        self.headers, self.extra = headers or {}, extra


def found(value, what: str, identifier: str):
    """``value``, or a 404 naming what the tenant does not hold."""
    if value is None:
        raise ServiceError(404, "not_found", f"no {what} {identifier[:60]} in this tenant's memory", f"{what}_id")
    return value


async def service_error(_request: Request, error: ServiceError) -> JSONResponse:
    return JSONResponse(error_body(error.code, error.message, error.field, **error.extra),
                        status_code=error.status, headers=error.headers)


async def invalid_input(_request: Request, error: InvalidInputError) -> JSONResponse:
    return JSONResponse(error_body("invalid_input", error.reason, error.field), status_code=422)


async def invalid_body(_request: Request, error: RequestValidationError) -> JSONResponse:
    first = error.errors()[0] if error.errors() else {"loc": ("body",), "msg": "invalid request"}
    # ("query", "offset") → "offset": the field as the client wrote it, wherever it was sent.
    location = [str(part) for part in first["loc"]] or ["body"]
    where = ".".join(location[1:]) or location[0]
    return JSONResponse(error_body("invalid_input", first["msg"], where), status_code=422)


async def http_error(_request: Request, error: StarletteHTTPException) -> JSONResponse:
    return JSONResponse(error_body("not_found" if error.status_code == 404 else "http_error", str(error.detail)),
                        status_code=error.status_code)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, service_error)
    app.add_exception_handler(InvalidInputError, invalid_input)
    app.add_exception_handler(RequestValidationError, invalid_body)
    app.add_exception_handler(StarletteHTTPException, http_error)
