"""HTTP to a serving engine: JSON requests, server-sent event streams, faults as lines.

Every way a server can fail is turned into one :class:`~loomterm.errors.ServerError`
subclass with a one-line message that names the server (its address without any
credentials) and what to do:

- nothing listening -> ``ServerUnreachable``; no answer in time (connect or read
  timeout) -> ``ServerTimeout``; a stream that ends before its last event ->
  ``ServerStreamCut``;
- 401/403 -> ``ServerAuthError``; 429 -> waits out a short ``Retry-After`` (up to
  ``RATE_LIMIT_WAIT_S``) and tries again, else ``ServerRateLimited``; any other 4xx/5xx ->
  ``ServerError`` with the server's own message.

What secrets go where is :mod:`~loomterm.engine.remote.credentials`'s business: the
API key (from the environment or a variable the config names) is sent as a bearer token
only to an origin the user named for it, never over plain http to a host that is not
loopback, and never appears in a message. Redirects are not followed (a 3xx is one
line), so no header is ever forwarded to another origin. The config's headers for the
origin go on every request; its body fields into every completion request.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx

from loomterm.engine.remote.credentials import (
    KEY_VARIABLES,  # noqa: F401 - re-exported: where code has always found it
    CredentialError,
    Credentials,
    Origin,
    resolve,
)
from loomterm.engine.remote.origins import check_secret
from loomterm.engine.remote.sse import bounded_reply, read_reply, sse_lines
from loomterm.errors import (
    ServerAuthError,
    ServerError,
    ServerRateLimited,
    ServerStreamCut,
    ServerTimeout,
    ServerUnreachable,
)

RATE_LIMIT_WAIT_S = 10.0  # a Retry-After up to this long is waited out, at most 3 times
RATE_LIMIT_TRIES = 3


@dataclass(frozen=True)
class Timeouts:
    """Seconds to wait: for the connection, and for each read (a token, a reply)."""

    connect: float = 5.0
    read: float = 60.0


def api_key() -> str | None:
    """The environment's API key (``KEY_VARIABLES``, the first set), checked; None when
    none is set. Where it may go is ``credentials.resolve``'s business."""
    from loomterm.engine.remote.credentials import environment_key

    found = environment_key()
    return found[1] if found else None


def split_url(url: str) -> SplitResult:
    """``url``'s parts; a malformed one (``http://[::1``, a port that is no number or
    out of range) is a one-line :class:`ServerError` that does not echo it (it may hold
    a password)."""
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 - read to have it checked
    except ValueError as exc:
        raise ServerError(f"not a server address ({exc}); use http://host:port") from None
    return parts


def public_url(url: str) -> str:
    """``url`` without user, password, query or trailing slash: safe to show and store."""
    parts = split_url(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))


class ServerClient:
    """One server's HTTP client: JSON in and out, SSE streams, errors as one line.

    Thread-safe (``httpx.Client`` is), so sibling streams can run side by side.
    """

    def __init__(
        self,
        url: str,
        timeouts: Timeouts | None = None,
        key: str | None = None,
        credentials: Credentials | None = None,
        named_by: str = "user",
    ):
        """``credentials``: what to send (None: ``credentials.resolve(url, named_by)``);
        ``key`` replaces its key (checked, and bound to ``url``'s origin like any)."""
        origin = Origin.of(url)  # a bad address is one line, with no password in it
        if named_by != "user":
            url = public_url(url)  # a file's user and password are not sent either
        self.url = public_url(url)
        parts = split_url(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ServerError(f"{self.url!r} is not a server address (use http://host:port)")
        self.timeouts = timeouts or Timeouts()
        if credentials is None:
            credentials = resolve(url, named_by)
        if key is not None:
            key = check_secret(key, "the API key")
            credentials = replace(credentials, key=key, key_from="the API key", withheld=None)
            if origin.scheme == "http" and not origin.loopback:
                raise CredentialError(
                    f"not sending the API key to {origin} over plain http: use https://",
                    self.url,
                )
        self.credentials = credentials
        headers = httpx.Headers({"Accept": "application/json"})
        headers.update(credentials.headers)
        if credentials.key and "authorization" not in headers:  # the config's own wins
            headers["Authorization"] = f"Bearer {credentials.key}"
        self.has_key = bool(credentials.key)
        self.body_fields = credentials.body_fields()
        # A user and password in the address go as basic auth only when the user gave it.
        given = named_by == "user" and parts.username and credentials.origin is not None
        auth = (parts.username or "", parts.password or "") if given else None
        self.http = httpx.Client(
            base_url=self.url,
            headers=headers,
            auth=auth,
            timeout=httpx.Timeout(self.timeouts.read, connect=self.timeouts.connect),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            trust_env=False,  # a proxy from the environment must not see the key
            follow_redirects=False,  # no header (the key) is forwarded to another origin
        )

    def close(self) -> None:
        self.http.close()

    # -- plain requests -----------------------------------------------------------------
    def get(self, path: str, missing_ok: bool = False) -> Any:
        """GET ``path`` as JSON; None for a 404/405 when ``missing_ok`` (probing)."""
        return self._json("GET", path, None, missing_ok)

    def post(
        self, path: str, body: dict, missing_ok: bool = False, completion: bool = False
    ) -> Any:
        """POST ``body`` to ``path``; the reply as JSON. A ``completion`` request also
        carries the config's body fields for this server."""
        return self._json("POST", path, self.with_fields(body) if completion else body, missing_ok)

    def with_fields(self, body: dict) -> dict:
        """A completion request's ``body`` with the config's fields for this server
        (``credentials.Credentials.body_fields``: they win over loomterm's defaults,
        except the fields that shape the request and its stream)."""
        return {**body, **self.body_fields} if self.body_fields else body

    def _send(self, request: httpx.Request, stream: bool = False) -> httpx.Response:
        """Send once more when a kept-alive connection turns out closed by the server
        (it closes idle ones): no answer came, so nothing was done twice."""
        with self._faults(request.url.path):
            try:
                return self.http.send(request, stream=stream)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                return self.http.send(request, stream=stream)

    def _json(self, method: str, path: str, body: dict | None, missing_ok: bool) -> Any:
        for attempt in range(RATE_LIMIT_TRIES + 1):
            reply = self._send(self.http.build_request(method, path, json=body), stream=True)
            with self._faults(path):  # the body in bounded time and size
                reply = read_reply(reply, self.url, path, self.timeouts.read)
            if reply.status_code == 429 and self._wait_out(reply, attempt):
                continue
            if missing_ok and reply.status_code in (404, 405, 501):
                return None
            self.raise_for(reply, path)
            try:
                return reply.json()
            except (ValueError, RecursionError):  # RecursionError: nested too deeply
                raise ServerError(
                    f"the server at {self.url} answered {path} with something that is not JSON",
                    self.url,
                    reply.status_code,
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    # -- streams ------------------------------------------------------------------------
    def stream(self, path: str, body: dict, cancel: threading.Event | None = None) -> Stream:
        """POST ``body`` and open its event stream (see :class:`Stream`)."""
        for attempt in range(RATE_LIMIT_TRIES + 1):
            request = self.http.build_request("POST", path, json=self.with_fields(body))
            reply = self._send(request, stream=True)
            if reply.status_code == 429:
                reply.read()
                reply.close()
                if cancel is not None and cancel.is_set():
                    break
                if self._wait_out(reply, attempt):
                    continue
            if reply.status_code >= 300:
                self.raise_for(bounded_reply(reply), path)
            return Stream(self, reply, path)
        raise ServerError(f"the server at {self.url} kept refusing with 429", self.url, 429)

    # -- faults -------------------------------------------------------------------------
    def _faults(self, path: str, tokens: int | None = None):
        return _Faults(self, path, tokens)

    def _wait_out(self, reply: httpx.Response, attempt: int) -> bool:
        """After a 429: sleep the asked-for time and return True, or raise."""
        wait = _retry_after(reply.headers.get("Retry-After"))
        if wait is not None and wait <= RATE_LIMIT_WAIT_S and attempt < RATE_LIMIT_TRIES:
            time.sleep(max(wait, 0.1))
            return True
        asked = f"; it asks to wait {wait:.0f} s" if wait is not None else ""
        raise ServerRateLimited(
            f"the server at {self.url} is rate limiting requests (429){asked}; try again later",
            self.url,
            retry_after=wait,
        )

    def raise_for(self, reply: httpx.Response, path: str) -> None:
        """Raise the one-line error for a 4xx/5xx reply; return on success."""
        status = reply.status_code
        if 300 <= status < 400:
            raise self._redirected(reply, path)
        if status < 400:
            return
        message = _server_message(reply, self.credentials.scrub)
        if status in (401, 403):
            creds = self.credentials
            if creds.withheld:
                hint = creds.withheld
            elif self.has_key:
                hint = f"check {creds.key_from or 'LOOMTERM_API_KEY (or OPENAI_API_KEY)'}"
            else:
                hint = "set LOOMTERM_API_KEY (or OPENAI_API_KEY) to its key"
            said = f": {message}" if message else ""
            what = "asks for an API key" if creds.withheld else "refused the API key"
            raise ServerAuthError(
                f"the server at {self.url} {what} ({status}{said}); {hint}",
                self.url,
                status,
            )
        if status == 429:
            self._wait_out(reply, RATE_LIMIT_TRIES)
        said = message or reply.reason_phrase or "no reason given"
        raise ServerError(
            f"the server at {self.url} answered {path} with {status}: {said}", self.url, status
        )

    def _redirected(self, reply: httpx.Response, path: str) -> ServerError:
        """A 3xx: not followed (the key must not go to another origin), said in one line."""
        location = reply.headers.get("Location", "")
        try:
            target = str(reply.url.join(location)) if location else ""
            where = (
                f" to {_printable(self.credentials.scrub(public_url(target)))}" if target else ""
            )
        except (httpx.InvalidURL, ValueError):
            where = ""
        return ServerError(
            f"the server at {self.url} redirected {path}{where} ({reply.status_code}); "
            "loomterm does not follow redirects: give the address it names",
            self.url,
            reply.status_code,
        )


def check_reachable(url: str, connect_timeout: float | None = None) -> None:
    """Raise the one-line :class:`ServerError` that connecting would give when nothing
    accepts a connection at ``url`` (refused, unknown host, connect timeout); any
    answer, even an HTTP error, passes. Needs only httpx: the command line calls it
    before importing torch, so a server that is not running is said at once."""
    base = Timeouts()
    timeouts = Timeouts(
        connect=connect_timeout if connect_timeout is not None else base.connect,
        read=base.connect,  # an answer of any kind will do: no long wait for one
    )
    resolve(url, "user")  # a secret bound for plain http is refused before any connection
    client = ServerClient(url, timeouts, credentials=Credentials.none())  # no secret needed
    try:
        client.http.send(client.http.build_request("GET", "/"))
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise translate(exc, client) from None
    except httpx.HTTPError:
        pass  # it accepted the connection: the real connect reports anything else
    finally:
        client.close()


class _Faults:
    """Turns httpx's transport errors inside the block into one-line ServerErrors."""

    def __init__(self, client: ServerClient, path: str, tokens: int | None) -> None:
        self.client, self.path, self.tokens = client, path, tokens

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or not isinstance(exc, httpx.HTTPError):
            return False
        raise translate(exc, self.client, self.tokens) from None


def translate(exc: httpx.HTTPError, client: ServerClient, tokens: int | None = None) -> ServerError:
    """The ServerError for an httpx transport error. ``tokens``: streamed so far."""
    url = client.url
    kept = f" after {tokens} token(s), which are kept" if tokens else ""
    if isinstance(exc, httpx.ConnectTimeout):
        return ServerTimeout(
            f"the server at {url} did not accept a connection within "
            f"{client.timeouts.connect:g} s (connect timeout)",
            url,
        )
    if isinstance(exc, httpx.ConnectError):
        reason = _short(exc)
        return ServerUnreachable(
            f"cannot reach the server at {url} ({reason}): is it running?", url
        )
    if isinstance(exc, (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)):
        return ServerTimeout(
            f"the server at {url} stopped answering for {client.timeouts.read:g} s "
            f"(read timeout){kept}",
            url,
        )
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        if tokens is None:
            return ServerStreamCut(
                f"the server at {url} closed the connection without an answer ({_short(exc)})",
                url,
            )
        return ServerStreamCut(
            f"the server at {url} cut the stream{kept or ' before the first token'}: "
            "it stopped or restarted",
            url,
        )
    return ServerError(f"talking to the server at {url} failed: {_short(exc)}", url)


class Stream:
    """An open event stream: iterate for the JSON events, ``close`` to stop early.

    Events are the ``data:`` lines of server-sent events; ``[DONE]`` ends the stream;
    an ``{"error": ...}`` event raises. Transport errors raise ServerErrors that say
    how many events (tokens) came first. ``close`` may be called from another thread.
    """

    def __init__(self, client: ServerClient, reply: httpx.Response, path: str) -> None:
        self.client, self.reply, self.path = client, reply, path
        self.tokens = 0  # events carrying tokens, counted by the reader (for messages)
        self.done = False  # [DONE] seen
        self.closed = False

    def __iter__(self) -> Iterator[dict]:
        try:
            lines = sse_lines(self.reply.iter_bytes(), self.client.url, self.path)  # bounded
            while True:
                try:
                    line = next(lines)
                except StopIteration:
                    return
                except httpx.HTTPError as exc:
                    if self.closed:
                        return
                    raise translate(exc, self.client, self.tokens) from None
                except (OSError, ValueError, AttributeError):
                    if self.closed:  # closed from another thread mid-read
                        return
                    raise
                if not line.startswith("data:"):
                    continue  # comments (pings), event names, blank separators
                data = line[5:].strip()
                if data == "[DONE]":
                    self.done = True
                    return
                try:
                    event = json.loads(data)
                except (ValueError, RecursionError):
                    event = None
                if not isinstance(event, dict):  # every dialect's events are objects
                    raise ServerStreamCut(
                        f"the server at {self.client.url} sent a broken event on {self.path}",
                        self.client.url,
                    ) from None
                if "error" in event and len(event) <= 2:
                    said = _error_text(event["error"], self.client.credentials.scrub)
                    raise ServerError(
                        f"the server at {self.client.url} stopped the stream: {said}",
                        self.client.url,
                    )
                yield event
        finally:
            self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.reply.close()
            except Exception:  # noqa: BLE001 - closing a half-read socket from another thread
                pass


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return None


def _server_message(reply: httpx.Response, scrub: Callable[[str], str]) -> str:
    """The server's own words for an error, one line, its secrets masked by ``scrub``
    (before any cut, so no part of a secret is left)."""
    try:
        body = reply.json()
    except ValueError:
        text = reply.text.strip().splitlines()
        return scrub(text[0])[:200] if text else ""
    if isinstance(body, dict):
        for key in ("error", "detail", "message"):
            if key in body:
                return _error_text(body[key], scrub)
    return ""


def _error_text(error: Any, scrub: Callable[[str], str]) -> str:
    if isinstance(error, dict):
        error = error.get("message") or error.get("msg") or json.dumps(error)
    if isinstance(error, list) and error:
        return _error_text(error[0], scrub)
    text = scrub(" ".join(str(error).split()))
    return text[:240]


def _printable(text: str) -> str:
    return "".join(c for c in text if c.isprintable())[:160]


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if "Connection refused" in text or "ECONNREFUSED" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return text[:160]
