"""What a session opens on: how (:class:`OpenOptions`), its file read without the model
(:func:`read_file`), the model loaded or the server connected (:func:`model_for`), and the
Loom made over the file's tree (:func:`loom_for`). :meth:`Session.open
<loomterm.sessions.session.Session.open>` puts them together.

The engine is imported lazily.
"""

from __future__ import annotations

import os
import shutil
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm import store as store_mod
from loomterm.engine.text import PieceMaker
from loomterm.errors import SessionError
from loomterm.sessions.importing import retokenized
from loomterm.sessions.kv_snapshot import load_kv_snapshot, snapshot_path
from loomterm.sessions.names import resolve_session
from loomterm.store import SessionData, SessionStore

if TYPE_CHECKING:
    from loomterm.engine import Loom
    from loomterm.engine.models.load import LoadedModel


@dataclass(frozen=True)
class OpenOptions:
    """How :meth:`Session.open` opens a session.

    Attributes:
        model: The model to use; None means the one the session was made with.
        device, dtype, quant, n_ctx, kv_budget: How to load a local model and size
            its cache (the engine options of the same names).
        progress: ``progress(stage, done, total)`` while loading and prefilling.
        read_only: Do not lock the file or write to it; changes stay in memory.
        retokenize: If ``model`` differs from the session's, re-tokenize every node's
            text with it (the old file is kept as ``<file>.<time>.bak``; logprobs and
            alternatives, which belonged to the old model, are dropped). With
            ``read_only`` a different model gets a re-tokenized copy in memory.
        kv_snapshot: Use (and on close, refresh) a KV snapshot beside the file.
            None: use one if present.
        server_kind, server_model: For a session on a server (its model source is a
            URL): override the kind and model it recorded.
        backend, threads: As ``Loom.load``; ``"auto"`` reopens a session made on
            llama.cpp (``--backend llama.cpp``) on llama.cpp again.
        loaded: A model already loaded (the editor's, to switch sessions in place):
            used instead of loading or connecting to ``model``; checked against the
            session's like any other.
        reattach: Attach again the other models the session had attached and make the
            one that was active active again (``sessions.models``); one that cannot come
            back is a one-line note (``on_note``, default a warning) and stays
            recorded. ``loaded_models``: local models already in memory that may serve
            instead of loading them again.
        opened: The file already read (and locked) by :func:`read_file`, whose tree the
            editor showed while this loads the model: the Loom adopts that very tree.
    """

    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    n_ctx: int | None = None
    kv_budget: int | str | None = None
    progress: Callable[..., None] | None = None
    read_only: bool = False
    retokenize: bool = False
    kv_snapshot: bool | None = None
    server_kind: str | None = None
    server_model: str | None = None
    loaded: LoadedModel | None = None
    quant: str | None = "none"
    reattach: bool = False
    loaded_models: Sequence[LoadedModel] = ()
    on_note: Callable[[str], None] | None = None
    backend: str = "auto"
    threads: int | None = None
    opened: OpenedFile | None = None


@dataclass
class OpenedFile:
    """A session file read without its model: its path, its store (locked; None when
    read-only) and what it holds."""

    path: Path
    store: SessionStore | None
    data: SessionData

    def close(self) -> None:
        """Give the file back (its lock) when no Session came to own it."""
        if self.store is not None:
            self.store.close()


def read_file(path: str | os.PathLike, read_only: bool = False) -> OpenedFile:
    """Read (and, unless ``read_only``, lock) a saved session: light, no model. The
    first half of :meth:`Session.open`, which takes it as ``opened``."""
    path = resolve_session(path)
    if read_only:
        return OpenedFile(path, None, store_mod.load(path))
    store = SessionStore.open(path)  # validates first, then locks
    try:
        return OpenedFile(path, store, store.read())
    except BaseException:
        store.close()
        raise


def model_for(data: SessionData, path: Path, how: OpenOptions) -> tuple[Any, bool]:
    """The model to open ``data`` on (loaded, connected or the caller's), and whether
    it is a runner already (a server, llama.cpp): the Loom is then made on it as it is."""
    from loomterm.engine.models.load import LoadedModel
    from loomterm.engine.remote import is_server_url

    if how.loaded is not None:
        return how.loaded, False  # the caller's model, checked against the session's
    source = how.model or data.model.get("source")
    if not source:
        raise SessionError(f"session {path.name} records no model: pass one with --model")
    if is_server_url(source):
        overrides = {"kind": how.server_kind, "model_arg": how.server_model}
        named_by = "user" if how.model else "file"  # a file's URL gets no key unasked
        return _connect_server(data, source, how.read_only, overrides, named_by), True
    from loomterm.engine.open import load

    # ``auto`` keeps the backend the session ran on for its own model (a record without
    # one ran on torch); another model takes ``auto``'s own choice.
    own = how.model is None or _same_source(how.model, data.model.get("source"))
    recorded = str(data.model.get("backend") or "torch") if own else None
    model = load(source, _runner_options(how), how.progress, recorded)
    return model, not isinstance(model, LoadedModel)


def _same_source(given: str, recorded: Any) -> bool:
    """Whether the model value ``given`` names the recorded source (a path resolved)."""
    if not isinstance(recorded, str):
        return False
    if given == recorded:
        return True
    try:
        return Path(given).expanduser().resolve() == Path(recorded).expanduser().resolve()
    except (OSError, ValueError):
        return False


def _runner_options(how: OpenOptions):
    """``how``'s engine options as ``engine.open.RunnerOptions``."""
    from loomterm.engine.open import RunnerOptions

    return RunnerOptions(
        backend=how.backend,
        threads=how.threads,
        device=how.device,
        dtype=how.dtype,
        quant=how.quant,
        n_ctx=how.n_ctx,
        kv_budget=how.kv_budget,
    )


def retokenize_file(
    data: SessionData, loaded: Any, pieces: PieceMaker, store: SessionStore | None, path: Path
) -> SessionData:
    """``data`` re-tokenized for ``loaded``; a writable file is backed up, then
    rewritten with the new tree."""
    data = retokenized(data, loaded, pieces)
    if store is not None:
        backup = path.with_name(f"{path.name}.{time.strftime('%Y%m%d-%H%M%S')}.bak")
        shutil.copy2(path, backup)
        store.write_tree(data.tree, lambda n: data.pieces[n.id], data.cursor_node, model=data.model)
    return data


def loom_for(data: SessionData, loaded: Any, remote: bool, how: OpenOptions, path: Path) -> Loom:
    """A Loom over ``data``'s tree on ``loaded``, with the file's settings, context
    versions, models and cursor."""
    from loomterm.config.settings import Settings
    from loomterm.engine import Loom
    from loomterm.engine.open import runner_for

    loom = Loom(runner_for(loaded, _runner_options(how)), tree=data.tree)
    settings, notes = Settings.from_stored(data.settings)
    notes += loom.contexts.versions.load(data.contexts)
    for note in notes:
        warnings.warn(f"session {path.name}: {note}", stacklevel=3)
    loom.settings = settings
    # Who wrote what: keys stay those of the file.
    loom.adopt_models(data.models, data.model_state)
    loom.cursor = data.cursor_node
    if how.progress is not None:
        loom.progress = how.progress
    return loom


def restore_kv(loom: Loom, path: Path, kv_snapshot: bool | None) -> bool:
    """Load the KV snapshot beside ``path`` when there is one and it may be used;
    whether it was."""
    snapshot = snapshot_path(path)
    if loom.capabilities.node_kv and kv_snapshot is not False and snapshot.exists():
        return load_kv_snapshot(loom, snapshot)
    return False


def _connect_server(
    data: SessionData,
    url: str,
    read_only: bool,
    overrides: dict[str, str | None],
    named_by: str = "file",
) -> Any:
    """The runner for a session on a server. Its recorded server options (kind, model,
    tokenizer) are reused when the URL is the recorded one, unless ``overrides`` says
    otherwise. Read-only, an unreachable server gives an offline runner that shows the
    stored text."""
    from loomterm.engine.remote import connect
    from loomterm.engine.remote.http import public_url
    from loomterm.engine.remote.runner import RemoteRunner
    from loomterm.errors import ServerError, ServerModelError

    record = (
        data.model if public_url(str(data.model.get("source") or "")) == public_url(url) else {}
    )
    server = dict(record.get("server") or {})
    server.update({key: value for key, value in overrides.items() if value})
    options = dict(
        server_kind=server.get("kind"),
        server_model=server.get("model_arg"),
        tokenizer=server.get("tokenizer_source"),
    )
    try:
        return connect(url, **options, named_by=named_by)
    except ServerModelError:
        raise
    except ServerError as exc:
        if not read_only:
            raise SessionError(
                f"{exc}; session {data.name!r} can still be read with --read-only"
            ) from None
        record = dict(record, source=url, server=server)
        return RemoteRunner.offline(record, _offline_codec(data, server), exc)


def _offline_codec(data: SessionData, server: dict[str, Any]) -> Any:
    """The recorded local tokenizer when it loads here, else the stored pieces' text."""
    from loomterm.engine.remote.tokens import StoredTokenText, load_tokenizer
    from loomterm.engine.text import TokenText
    from loomterm.errors import LoomError

    source = server.get("tokenizer_source")
    if source:
        try:
            return TokenText(load_tokenizer(source))
        except LoomError:
            pass
    return StoredTokenText.from_tree(data.tree.root.walk(), data.pieces)
