"""Other looms' trees and loomterm JSON written as new sessions, and a session's text
re-tokenized for another model. The engine is imported lazily."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from loomterm import store as store_mod
from loomterm.engine.text import PieceMaker
from loomterm.errors import SessionError
from loomterm.sessions.identity import model_record, same_model
from loomterm.sessions.names import session_path
from loomterm.store import SESSION_SUFFIX, SessionData

if TYPE_CHECKING:
    from loomterm.engine.models.load import LoadedModel


def retokenized(data: SessionData, loaded: LoadedModel, pieces: PieceMaker) -> SessionData:
    """``data`` with every node's text encoded by another model's tokenizer."""
    from loomterm.export import retokenize_tree, text_tree_of

    tree = retokenize_tree(text_tree_of(data), _encoder_of(loaded))
    return SessionData(
        tree=tree,
        pieces={node.id: pieces.node_pieces(node) for node in tree.root.walk()},
        cursor=data.cursor,
        settings=data.settings,
        contexts=data.contexts,
        model=model_record(loaded),
        vocab={},
        created=data.created,
        modified=data.modified,
        name=data.name,
        caret=data.caret,  # a character offset: the text, and so the place, is the same
    )


def _encoder_of(loaded: Any) -> Callable[[str, bool], list[int]]:
    """A loaded model's tokenizer, or a runner's ``encode`` (a server without one here)."""
    tokenizer = getattr(loaded, "tokenizer", None)
    if tokenizer is not None:
        return _encoder(tokenizer)
    return lambda text, at_start: loaded.encode(text, at_start) if text else []


def _encoder(tokenizer: Any) -> Callable[[str, bool], list[int]]:
    def encode(text: str, at_start: bool) -> list[int]:
        return list(tokenizer(text, add_special_tokens=at_start)["input_ids"]) if text else []

    return encode


def import_session(
    source: SessionData | Any,
    target: str | os.PathLike,
    model: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    quant: str | None = "none",
) -> SessionData:
    """Write an imported tree (from :func:`loomterm.export.read_import`) as a new session.

    A loomterm tree with tokens is written as is, without loading any model, unless
    ``model`` names a different one (then its text is re-tokenized). A text-only tree
    is tokenized with ``model`` (None: the default model). A server the file names is
    never contacted here: its tree is written as is, and opening the session connects
    (asking before any key goes there, ``remote.credentials``).
    """
    from loomterm.engine.remote import is_server_url
    from loomterm.export import TextTree, retokenize_tree

    target = session_path(target)
    if target.exists():
        raise SessionError(f"a session already exists at {target}; choose another name")
    named = source_model(source)
    if (
        isinstance(source, SessionData)
        and model is None
        and (source.model.get("fingerprint") or is_server_url(named))
    ):
        data = source
    else:
        # A server named by the file is not contacted: the default model tokenizes.
        wanted = model or (None if is_server_url(named) else named)
        loaded, pieces = _tokenizing_model(wanted, device, dtype, quant)
        if isinstance(source, SessionData) and same_model(
            source.model.get("fingerprint"), loaded.fingerprint
        ):
            data = source
        elif isinstance(source, SessionData):
            data = retokenized(source, loaded, pieces)
        else:
            assert isinstance(source, TextTree)
            tree = retokenize_tree(source, _encoder_of(loaded))
            data = SessionData(
                tree=tree,
                pieces={node.id: pieces.node_pieces(node) for node in tree.root.walk()},
                cursor=source.cursor,
                settings=imported_settings(source.settings, loaded),
                model=model_record(loaded),
                created=source.created_at,
                modified=time.time(),
                name=target.name.removesuffix(SESSION_SUFFIX),
            )
    store_mod.write_session(target, data).close()
    return store_mod.load(target)


def _tokenizing_model(
    wanted: str | None, device: str, dtype: str, quant: str | None
) -> tuple[Any, PieceMaker]:
    """The model (loaded, or a server connected to) that tokenizes an imported tree,
    and its pieces."""
    from loomterm.engine.models.load import load_model
    from loomterm.engine.remote import connect, is_server_url

    if is_server_url(wanted):
        loaded = connect(wanted)
        return loaded, PieceMaker(loaded.codec)
    loaded = load_model(wanted, device=device, dtype=dtype, quant=quant)
    return loaded, PieceMaker.for_tokenizer(loaded.tokenizer)


def imported_settings(stored: dict[str, Any], loaded: Any) -> dict[str, Any]:
    """The settings of a tree imported from another loom: its own where it has any
    sampler, else the samplers a new session starts with (llama.cpp's, then the
    model's generation_config), not loomterm's neutral defaults."""
    from loomterm.config.presets import starting_samplers
    from loomterm.config.settings import Settings

    if any(Settings.SPECS[name].sampling for name in stored if name in Settings.SPECS):
        return stored
    config = getattr(getattr(loaded, "model", None), "generation_config", None)
    return starting_samplers(Settings.from_stored(stored)[0], config).as_dict()


def source_model(source: Any) -> str | None:
    """The model an imported tree names, if any (text-only trees name none)."""
    model = getattr(source, "model", None) or {}
    return model.get("source") if isinstance(model, dict) else None
