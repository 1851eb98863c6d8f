"""The llama-server client: its token endpoints, and what start-up reads from it.

`UpstreamVocabulary` answers the token questions `ChatService` asks (tokenize, a text's token
id, the context size) through the upstream's `/tokenize`, `/detokenize`, `/props` and
`/v1/models`. The upstream does not list its special tokens, so the ones the front end needs are
found among the template's markers (`learn_special_tokens`, `special_token_candidates`): a token
that spelled alone does not come back as itself is special. The short requests at start-up go
through httpx, the ones on every request's path (`/tokenize`) through `http.client`
(`JsonPoster`).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

from autoparser.llama.long_runs import tokenizer_pieces
from autoparser.server.errors import APIError

CONNECT_TIMEOUT_S = 10.0
STARTUP_WAIT_S = 60.0
"""How long start-up waits for an upstream that is still loading its model (503 on `/health`)."""


class UpstreamError(APIError):
    """The upstream could not be reached or refused a request: a 502 whose message says why in
    one line (a request that meets it while being prepared gets it as its answer)."""

    def __init__(self, message: str) -> None:
        super().__init__(502, message, code="upstream_error")


def _error_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"HTTP {response.status_code}: {error.get('message', error)}"
    return f"HTTP {response.status_code}: {body}"


class UpstreamVocabulary:
    """The token side of `Engine`, answered by the upstream llama-server; generating is the worker's."""

    vocab_ptr = None
    """No local vocabulary: grammars are checked by llama.cpp's parser without one (token
    references by name are checked for syntax; the upstream resolves them)."""
    longest_token_bytes = 0
    """Unknown here: prompt lengths are counted by tokenizing, never estimated from bytes."""
    gpu_offload = False

    def __init__(self, base_url: str, timeout: float = 60.0, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        """What every request to the upstream carries (its API key)."""
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers,
                                  timeout=httpx.Timeout(timeout, connect=CONNECT_TIMEOUT_S))
        self._posts = JsonPoster(self.base_url, self.headers, timeout)
        self.model_id = ""
        self.chat_template: str | None = None
        self.bos_token = ""
        self.eos_token = ""
        self.n_ctx = 0
        """Tokens per slot: what one request may use."""
        self.n_parallel = 1
        self.n_ctx_total = 0
        self.n_vocab = 0
        self.special_tokens: set[str] = set()
        self.special_ids: dict[str, int] = {}

    # -- start-up ------------------------------------------------------------------------------

    def connect(self, wait_s: float = STARTUP_WAIT_S) -> None:
        """Wait until the upstream has loaded its model, then read what it serves."""
        self._await_ready(wait_s)
        props = self._get("/props")
        settings = props.get("default_generation_settings") or {}
        self.chat_template = props.get("chat_template") or None
        self.bos_token = props.get("bos_token") or ""
        self.eos_token = props.get("eos_token") or ""
        self.n_parallel = int(props.get("total_slots") or 1)
        self.n_ctx = int(settings.get("n_ctx") or 0)
        models = self._get("/v1/models").get("data") or [{}]
        meta = models[0].get("meta") or {}
        self.model_id = str(models[0].get("id") or "")
        self.n_vocab = int(meta.get("n_vocab") or 0)
        self.n_ctx = self.n_ctx or int(meta.get("n_ctx") or 0)
        if self.n_ctx <= 0:
            raise UpstreamError("the upstream did not report its context size")
        self.n_ctx_total = self.n_ctx * self.n_parallel

    def _await_ready(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                response = self._http.get("/health")
            except httpx.HTTPError as exc:
                raise UpstreamError(f"cannot reach {self.base_url}: {exc}") from None
            if response.status_code == 200:
                return
            if response.status_code != 503 or time.monotonic() > deadline:
                raise UpstreamError(f"{self.base_url}/health answered {_error_message(response)}")
            time.sleep(0.5)

    def learn_special_tokens(self, texts: Iterable[str]) -> None:
        """Find the special tokens inside `texts` (`special_token_candidates`).

        A special token is one that `/tokenize` gives for its text only when special tokens are
        parsed: tokenized as plain text, its spelling comes back as other tokens.
        """
        found: dict[str, int] = {}
        plain: set[str] = set()
        for text in dict.fromkeys(t for t in texts if t):
            for token, piece in self._pieces(text):
                if piece in found or piece in plain or not piece:
                    continue
                if self.tokenize(piece, parse_special=False) != [token]:
                    found[piece] = token
                else:
                    plain.add(piece)
        self.special_ids = found
        self.special_tokens = set(found)

    # -- the token methods `ChatService` uses --------------------------------------------------

    def tokenize(self, text: str, parse_special: bool = True, add_bos: bool = False) -> list[int]:
        """As `Engine.tokenize`: `text`'s tokens from the upstream, very long runs of characters
        in pieces: in one piece they crash llama.cpp's pre-tokenizer for some vocabularies,
        llama-server's too (27,000 letters killed it with DeepSeek's). A prompt's beginning
        tokenized before is reused by `ChatService` (`PrefixTokenizer`), not here."""
        tokens: list[int] = []
        for index, piece in enumerate(tokenizer_pieces(text, self.special_tokens if parse_special else ())):
            body = {"content": piece, "add_special": add_bos and index == 0, "parse_special": parse_special}
            tokens += [int(token) for token in self._post("/tokenize", body).get("tokens", [])]
        return tokens

    def token_id(self, text: str) -> int | None:
        """The id of `text` when it is exactly one token (special tokens included), else None."""
        if text in self.special_ids:
            return self.special_ids[text]
        pieces = self._pieces(text)
        return pieces[0][0] if len(pieces) == 1 and pieces[0][1] == text else None

    def detokenize(self, tokens: list[int], special: bool = True) -> str:
        return str(self._post("/detokenize", {"tokens": list(tokens)}).get("content", ""))

    def token_to_piece(self, token: int, special: bool = True) -> bytes:
        return self.detokenize([token], special).encode("utf-8")

    def close(self) -> None:
        self._http.close()

    # -- HTTP ----------------------------------------------------------------------------------

    def _pieces(self, text: str) -> list[tuple[int, str]]:
        """(id, text) of each token of `text`; the text is empty for part of a character."""
        body = {"content": text, "add_special": False, "parse_special": True, "with_pieces": True}
        out = []
        for entry in self._post("/tokenize", body).get("tokens", []):
            piece = entry.get("piece")  # a list of bytes for a piece of a UTF-8 character: no text
            out.append((int(entry["id"]), piece if isinstance(piece, str) else ""))
        return out

    def _get(self, path: str) -> dict[str, Any]:
        try:
            response = self._http.get(path)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {self.base_url}{path}: {exc}") from None
        if response.status_code != 200:
            raise UpstreamError(f"{self.base_url}{path} answered {_error_message(response)}")
        return response.json()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            status, answer = self._posts.post(path, body)
        except (OSError, http.client.HTTPException) as exc:
            raise UpstreamError(f"cannot reach {self.base_url}{path}: {exc or type(exc).__name__}") from None
        if status != 200:
            raise UpstreamError(f"{self.base_url}{path} answered HTTP {status}: {refusal_text(answer)}")
        return json.loads(answer)


class JsonPoster:
    """JSON POSTs to one server with the standard library's `http.client`, on one connection per
    thread that is kept while the server keeps it. Every chat completion tokenizes its prompt
    through the upstream from the thread pool, and httpx's layers cost three times the CPU of
    this per request (about 290 against 90 µs for a `/tokenize`, measured against llama-server)."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        url = urlsplit(base_url)
        self._kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        self._address = (url.hostname or "localhost", url.port)
        self._timeout = timeout
        self._prefix = url.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", **headers}
        self._local = threading.local()

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """The status and body of the answer; OSError or HTTPException when there is none."""
        payload = json.dumps(body).encode()
        while True:
            connection = getattr(self._local, "connection", None)
            kept = connection is not None
            if connection is None:
                connection = self._local.connection = self._connect()  # OSError: no server there
            try:
                connection.request("POST", self._prefix + path, body=payload, headers=self._headers)
                response = connection.getresponse()
                answer = response.read()
            except (OSError, http.client.HTTPException):
                self._drop(connection)
                if kept:
                    continue  # the server closed the kept connection meanwhile: once more on a new one
                raise
            if response.will_close:
                self._drop(connection)
            return response.status, answer

    def _connect(self) -> http.client.HTTPConnection:
        connection = self._kind(*self._address, timeout=CONNECT_TIMEOUT_S)
        connection.connect()
        connection.sock.settimeout(self._timeout)
        return connection

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._local.connection = None


PROBE_CONVERSATIONS: tuple[list[dict[str, Any]], ...] = (
    [{"role": "system", "content": "a"}, {"role": "user", "content": "b"},
     {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}],
    [{"role": "user", "content": "b"}, {"role": "assistant", "content": "c"}, {"role": "user", "content": "d"}],
)
"""Conversations rendered once at start-up: the turn markers in their prompts are where the
special tokens a client must not be able to spell are."""


def special_token_candidates(analysis: Any, bos_token: str = "", eos_token: str = "") -> list[str]:
    """Texts where the template's special tokens are: every marker of the analysis (what the
    output is read by), its stops, BOS/EOS, and the prompts of short probe conversations (the
    turn markers)."""
    texts = [value for part in (analysis.reasoning, analysis.content, analysis.tools)
             for value in vars(part).values() if isinstance(value, str)]
    markers = getattr(analysis.tools, "markers", None)
    if markers is not None:
        texts += [value for value in vars(markers).values() if isinstance(value, str)]
    texts += list(analysis.stop) + list(analysis.preserved_tokens) + list(analysis.triggers)
    for conversation in PROBE_CONVERSATIONS:
        try:
            texts.append(analysis.render(conversation, add_generation_prompt=True))
        except Exception:  # noqa: BLE001 - a template that refuses this conversation shows nothing here
            continue
    return [text for text in (*texts, bos_token, eos_token) if text]


def refusal_text(body: bytes) -> str:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")
    return str(error.get("message", error)) if isinstance(error, dict) else str(error)
