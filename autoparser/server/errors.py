"""OpenAI error objects, and the exception that carries one through the server.

Every failure a client can see has the OpenAI shape
``{"error": {"message", "type", "param", "code"}}`` and an HTTP status that matches it, so the
official clients raise their usual exception classes (`BadRequestError`, `AuthenticationError`,
...). Raising `APIError` anywhere below the route is enough; the app turns it into a response.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The `type` strings OpenAI's API uses for each status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


@dataclass
class APIError(Exception):
    """A failure to report to the client as an OpenAI error object with `status`."""

    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    generated: dict[str, Any] | None = None
    """The message generated before a generation failed, carried in the error object so that a
    plain request that fails mid-way loses none of it (a stream has sent it as deltas)."""

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        body = error_body(self.status, self.message, param=self.param, code=self.code, type=self.type)
        if self.generated is not None:
            body["error"]["generated"] = self.generated
        return body


def error_body(status: int, message: str, *, param: str | None = None, code: str | None = None,
               type: str | None = None) -> dict[str, Any]:
    """The JSON body of an OpenAI error response."""
    error_type = type or ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def overloaded(retry_after_s: int) -> APIError:
    """503 for a full queue; `Retry-After` tells well-behaved clients when to come back."""
    return APIError(503, "The server is busy: the request queue is full. Retry later.",
                    code="queue_full", headers={"Retry-After": str(retry_after_s)})


class EventError(str):
    """The text of a job's `("error", text)` event, with the status a plain request gets for it
    and the code both a plain request and a stream's error chunk carry. A `str`, so every
    endpoint shows it as it shows any generation failure."""

    status: int = 500
    code: str = "generation_error"
    generated: dict[str, Any] | None = None

    def __new__(cls, text: str, status: int = 500, code: str = "generation_error",
                generated: dict[str, Any] | None = None) -> EventError:
        self = super().__new__(cls, text)
        self.status, self.code, self.generated = status, code, generated
        return self


def event_error(text: str) -> dict[str, Any]:
    """The OpenAI error object a stream's error chunk carries for an `("error", text)` event."""
    return error_body(getattr(text, "status", 500), text, code=getattr(text, "code", "generation_error"))["error"]


def event_api_error(text: str) -> APIError:
    """The `APIError` a plain request answers with for an `("error", text)` event."""
    return APIError(getattr(text, "status", 500), str(text), code=getattr(text, "code", "generation_error"),
                    generated=getattr(text, "generated", None))


def shutting_down(message: str) -> EventError:
    return EventError(message, status=503, code="server_shutting_down")
