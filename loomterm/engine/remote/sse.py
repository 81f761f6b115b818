"""The lines of a server-sent event stream, read in bounded memory.

httpx's ``iter_lines`` keeps everything up to the next line break: a server that sends
300 MB without one grows the process by a gigabyte. :func:`sse_lines` splits the
stream's chunks (each at most what one network read gives) into lines itself and stops
with one line as soon as a line passes :data:`MAX_LINE_BYTES`, having held no more than
that. Lines end at ``\\r\\n``, ``\\n`` or ``\\r`` (the event stream format allows all
three) and are decoded as UTF-8 (invalid bytes replaced).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import httpx

from loomterm.errors import ServerStreamCut

MAX_LINE_BYTES = 1 << 20  # 1 MiB: a token event is well under a kilobyte
MAX_ERROR_BYTES = 64 << 10  # of an error reply's body: its message is in the first line
MAX_REPLY_BYTES = 64 << 20  # of a JSON reply (a long prompt's tokens are a few MB)


def sse_lines(
    chunks: Iterable[bytes], url: str, path: str, max_line: int = MAX_LINE_BYTES
) -> Iterator[str]:
    """Each line of the stream (without its line break). A line longer than
    ``max_line`` bytes raises :class:`~loomterm.errors.ServerStreamCut` in one line."""
    pending = bytearray()  # the start of a line whose end has not come
    after_cr = False  # the last chunk ended in "\r": a "\n" first in the next one is its pair
    for chunk in chunks:
        if not chunk:
            continue
        start = 0
        if after_cr and chunk[:1] == b"\n":
            start = 1
        after_cr = False
        while True:
            cut = _line_end(chunk, start)
            if cut < 0:
                pending += chunk[start:]
                if len(pending) > max_line:
                    raise _too_long(url, path, max_line)
                break
            if len(pending) + cut - start > max_line:
                raise _too_long(url, path, max_line)
            pending += chunk[start:cut]
            yield pending.decode("utf-8", errors="replace")
            pending.clear()
            if chunk[cut : cut + 2] == b"\r\n":
                start = cut + 2
            else:
                after_cr = chunk[cut : cut + 1] == b"\r" and cut + 1 == len(chunk)
                start = cut + 1
    if pending:
        yield pending.decode("utf-8", errors="replace")


def bounded_reply(reply: httpx.Response, limit: int = MAX_ERROR_BYTES) -> httpx.Response:
    """An error reply of a stream with at most ``limit`` bytes of its body read (a
    server may answer an error with an endless body); the stream is closed."""
    body = bytearray()
    try:
        for chunk in reply.iter_bytes():
            body += chunk
            if len(body) >= limit:
                break
    except httpx.HTTPError:
        pass  # what came is enough for a message
    finally:
        reply.close()
    skip = {"content-encoding", "content-length", "transfer-encoding"}  # body decoded here
    headers = [(k, v) for k, v in reply.headers.multi_items() if k.lower() not in skip]
    return httpx.Response(
        reply.status_code, headers=headers, content=bytes(body[:limit]), request=reply.request
    )


def read_reply(reply: httpx.Response, url: str, path: str, seconds: float) -> httpx.Response:
    """A plain (JSON) reply read whole within ``seconds`` of its headers and
    :data:`MAX_REPLY_BYTES`: a server that trickles a body forever, or sends an endless
    one, ends in one line instead of holding the caller (a per-read timeout never fires
    while bytes come)."""
    import time

    from loomterm.errors import ServerTimeout

    end = time.monotonic() + seconds
    body = bytearray()
    try:
        for chunk in reply.iter_bytes():
            body += chunk
            if len(body) > MAX_REPLY_BYTES:
                raise ServerStreamCut(
                    f"the server at {url} answered {path} with over {_size(MAX_REPLY_BYTES)}: "
                    "stopped reading it",
                    url,
                )
            if time.monotonic() > end:
                raise ServerTimeout(
                    f"the server at {url} took over {seconds:g} s to send its answer to {path}",
                    url,
                )
    finally:
        reply.close()
    skip = {"content-encoding", "content-length", "transfer-encoding"}  # body decoded here
    headers = [(k, v) for k, v in reply.headers.multi_items() if k.lower() not in skip]
    return httpx.Response(
        reply.status_code, headers=headers, content=bytes(body), request=reply.request
    )


def _line_end(chunk: bytes, start: int) -> int:
    """Where the first line break at or after ``start`` is (-1: none)."""
    newline = chunk.find(b"\n", start)
    ret = chunk.find(b"\r", start, newline if newline >= 0 else len(chunk))
    return ret if ret >= 0 else newline


def _too_long(url: str, path: str, max_line: int) -> ServerStreamCut:
    return ServerStreamCut(
        f"the server at {url} sent a line over {_size(max_line)} on {path}: "
        "not an event stream, stopped reading it",
        url,
    )


def _size(count: int) -> str:
    if count >= 1 << 20 and count % (1 << 20) == 0:
        return f"{count >> 20} MiB"
    if count >= 1 << 10 and count % (1 << 10) == 0:
        return f"{count >> 10} KiB"
    return f"{count} bytes"
