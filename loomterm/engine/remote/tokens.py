"""Which tokenizer makes a remote session's tokens, and token ids to bytes without one.

Tokens are the truth: the tree keeps ids, and prompts go to the server as ids. They are
made by the model's Hugging Face tokenizer when one can be found here *and* it agrees
with the server on :data:`~loomterm.engine.remote.servers.PROBE_TEXT` (fast, and it
works offline), else by the server's own ``/tokenize``. Where the local tokenizer is
looked for, in order:

1. the ``tokenizer`` the caller names (a model folder, a ``.gguf`` file, a hub id, or
   ``default``), e.g. the one a session recorded;
2. what the server says it loaded: llama-server's ``model_path`` (a ``.gguf`` file on
   this machine: its tokenizer is read once and cached in ``cache_dir()/tokenizers/``),
   vLLM's model root, SGLang's ``tokenizer_path``.

Without a local tokenizer the codec is :class:`ServerTokenText`: it learns each token's
bytes from what the server sends (llama-server gives the bytes of every token it
tokenizes, generates or lists as an alternative) and asks ``/detokenize`` for the rest.
:class:`StoredTokenText` rebuilds the text of a saved session from its stored pieces,
for reading a session while its server is unreachable.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from loomterm.config import locations
from loomterm.engine.text import TokenText
from loomterm.errors import LoomError, ModelLoadError

log = logging.getLogger("loomterm")

DEFAULT_SOURCES = ("default", "SmolLM2-135M-Instruct")


def load_tokenizer(source: str) -> Any:
    """A Hugging Face tokenizer from a folder, a ``.gguf`` file, a hub id or ``default``.

    Raises ModelLoadError (one line) when it cannot be read here.
    """
    from transformers import AutoTokenizer

    from loomterm.engine.models.gguf import quiet_warnings, short_reason

    text = str(source).strip()
    path = Path(text).expanduser()
    try:
        if text in DEFAULT_SOURCES:
            return _default_tokenizer()
        if path.is_file() and path.suffix.lower() == ".gguf":
            return _gguf_tokenizer(path)
        if path.is_dir():
            with quiet_warnings():
                return AutoTokenizer.from_pretrained(str(path))
        if path.is_absolute() or text.startswith((".", "~")):
            raise ModelLoadError(f"tokenizer {text}: no such file or folder here")
        with quiet_warnings():
            return AutoTokenizer.from_pretrained(text)
    except LoomError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers raises many kinds
        raise ModelLoadError(f"cannot load the tokenizer {text}: {short_reason(exc)}") from None


def _default_tokenizer() -> Any:
    from transformers import AutoTokenizer

    from loomterm.engine.models.default import default_model_dir

    return AutoTokenizer.from_pretrained(str(default_model_dir()))


def _gguf_tokenizer(path: Path) -> Any:
    """A GGUF file's tokenizer, read once (seconds) and kept in the cache by digest."""
    from transformers import AutoTokenizer

    from loomterm.engine.models.conversions import is_converted
    from loomterm.engine.models.default import DEFAULT_GGUF_SHA256
    from loomterm.engine.models.fingerprint import file_sha256
    from loomterm.engine.models.gguf import quiet_warnings

    digest = file_sha256(path)
    if digest == DEFAULT_GGUF_SHA256:
        folder = locations.cache_dir() / "models" / "SmolLM2-135M-Instruct"
        if is_converted(folder, digest):
            return AutoTokenizer.from_pretrained(str(folder))
    folder = locations.cache_dir() / "tokenizers" / digest[:24]
    with quiet_warnings():
        if (folder / "tokenizer_config.json").is_file():
            return AutoTokenizer.from_pretrained(str(folder))
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    try:
        tokenizer.save_pretrained(str(partial))
        os.replace(partial, folder)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)  # another process saved it first
    return tokenizer


def local_encode(tokenizer: Any, text: str, at_start: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=at_start)["input_ids"])


def eos_ids_of(tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    value = getattr(tokenizer, "eos_token_id", None)
    if isinstance(value, int):
        ids.add(value)
    elif isinstance(value, (list, tuple)):
        ids.update(int(v) for v in value)
    return ids


class ServerTokenText(TokenText):
    """Token ids to bytes for a server whose tokenizer is not here (see module doc).

    ``learn`` records bytes the server sent; unknown ids are asked of ``fetch``
    (``/detokenize``), once each.
    """

    def __init__(self, fetch: Callable[[int], bytes], special: set[int] | None = None) -> None:
        self.tokenizer = None
        self.special_ids = set(special or ())
        self.added_ids: set[int] = set()
        self.mode = "server"
        self._known: dict[int, bytes] = {}
        self._fetch = fetch
        self._lock = threading.Lock()
        self._bytes = self._lookup

    def learn(self, token: int, raw: bytes | None) -> None:
        if raw is not None:
            with self._lock:
                self._known.setdefault(int(token), bytes(raw))

    def _lookup(self, token_id: int) -> bytes:
        with self._lock:
            known = self._known.get(token_id)
        if known is not None:
            return known
        raw = self._fetch(token_id)
        self.learn(token_id, raw)
        return raw

    def lookup_text(self, text: str) -> int:
        """An id whose bytes are ``text`` (for servers that report tokens as text)."""
        raw = text.encode("utf-8")
        with self._lock:
            for token, known in self._known.items():
                if known == raw:
                    return token
        return -1


class StoredTokenText(TokenText):
    """The text of a saved tree from its stored per-token pieces, without a tokenizer.

    A token's piece is the text it completes in its context, so joining pieces along
    a path gives the path's text exactly; each id keeps the first non-empty piece seen.
    """

    def __init__(self, pieces: Mapping[int, str]) -> None:
        self.tokenizer = None
        self.special_ids: set[int] = set()
        self.added_ids: set[int] = set()
        self.mode = "stored"
        self._pieces = dict(pieces)
        self._bytes = lambda token_id: self._pieces.get(int(token_id), "").encode("utf-8")

    @classmethod
    def from_tree(cls, nodes: Any, pieces: Mapping[int, list[str]]) -> StoredTokenText:
        table: dict[int, str] = {}
        for node in nodes:
            for token, piece in zip(node.tokens, pieces.get(node.id) or []):
                if piece and int(token) not in table:
                    table[int(token)] = piece
        return cls(table)
