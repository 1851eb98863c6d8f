"""Checks on every request before it reaches a route: what a web page or a broken proxy could send.

A server on loopback is still reachable from any page the user's browser opens. Two things keep
such a page out: the `Host` header must name the server (DNS rebinding makes a page's own
hostname resolve to 127.0.0.1, but the browser still sends that hostname), and a body is read as
JSON only when it says it is JSON (a page may post `text/plain` anywhere without a CORS
preflight; `application/json` needs one, which this server does not grant unless
`--cors-allow-origins` asks). A request framed twice (`Content-Length` and `Transfer-Encoding`)
is refused, since a proxy in front may have read its end elsewhere (request smuggling).
"""

from __future__ import annotations

import ipaddress
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from starlette.types import ASGIApp, Receive, Scope, Send

from autoparser.server.errors import error_body

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The names a client on this machine uses for a server bound to a loopback address."""
BODY_METHODS = {"POST", "PUT", "PATCH"}
MAX_REQUEST_ID = 128


def default_allowed_hosts(bound_host: str, loopback: bool) -> tuple[str, ...]:
    """Without `--allowed-hosts`: the loopback names for a loopback address, else any host
    (a public address needs `--api-key`, which a page cannot send)."""
    if not loopback:
        return ("*",)
    return tuple(dict.fromkeys((*LOOPBACK_NAMES, bound_host.strip("[]").lower())))


def parse_allowed_hosts(text: str) -> tuple[str, ...]:
    """`--allowed-hosts a.example,b.example,*.lan`: names (no ports), `*` for any."""
    return tuple(dict.fromkeys(name.strip().strip("[]").lower() for name in text.split(",") if name.strip()))


def host_name(header: bytes) -> str:
    """The host part of a `Host` header: `[::1]:8000` -> `::1`, `Example.COM.:80` -> `example.com`."""
    text = header.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else ""
    if text.count(":") == 1:
        text = text.split(":", 1)[0]
    return text.rstrip(".")


def host_allowed(name: str, allowed: Iterable[str]) -> bool:
    for pattern in allowed:
        if pattern == "*" or name == pattern:
            return True
        if pattern.startswith("*.") and name.endswith(pattern[1:]) and _is_name(name):
            return True
    return False


def _is_name(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return True
    return False


def is_json_media_type(content_type: bytes) -> bool:
    """`application/json`, or any `+json` type, with or without parameters."""
    media = content_type.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def clean_request_id(given: bytes) -> bytes:
    """A client's `x-request-id` as it may be echoed and logged: printable ASCII only (no control
    characters, so no forged log lines or terminal escapes), at most `MAX_REQUEST_ID` bytes; a
    new id when nothing usable is left."""
    kept = bytes(b for b in given[: MAX_REQUEST_ID * 4] if 0x21 <= b <= 0x7E)[:MAX_REQUEST_ID]
    return kept or uuid.uuid4().hex.encode()


@dataclass(frozen=True)
class GuardSettings:
    allowed_hosts: tuple[str, ...] = ("*",)


class RequestGuardMiddleware:
    """400 for a `Host` outside `allowed_hosts` and for double framing, 415 for a body that is
    not declared JSON; before authentication, so the answer does not depend on the key."""

    def __init__(self, app: ASGIApp, settings: GuardSettings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message, code = refusal
        await send_error(send, status, message, code, close=True)

    def refusal(self, scope: Scope) -> tuple[int, str, str] | None:
        headers: dict[bytes, list[bytes]] = {}
        for name, value in scope.get("headers") or []:
            headers.setdefault(name.lower(), []).append(value)
        hosts = headers.get(b"host", [])
        if len(hosts) != 1 or not host_allowed(host_name(hosts[0]), self.settings.allowed_hosts):
            return (400, "The Host header does not name this server. Send the address the server listens "
                         "on, or start it with --allowed-hosts listing the name you use.", "invalid_host")
        if b"transfer-encoding" in headers and b"content-length" in headers:
            return (400, "The request has both Content-Length and Transfer-Encoding; send one.",
                    "conflicting_framing")
        if scope.get("method") in BODY_METHODS:
            types = headers.get(b"content-type", [])
            if len(types) != 1 or not is_json_media_type(types[0]):
                return (415, "The request body must be JSON, sent with 'Content-Type: application/json'.",
                        "unsupported_media_type")
        return None


async def send_error(send: Send, status: int, message: str, code: str,
                     headers: dict[str, str] | None = None, close: bool = False) -> None:
    """An OpenAI error object as the whole response; `close` ends the connection after it (the
    request's body, if any, is left unread)."""
    body = json.dumps(error_body(status, message, code=code)).encode()
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if close:
        raw_headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})
