"""The Loom's models: attach more runners to one tree, choose the active one, and tag
every generated node with the key of the model that wrote it (``engine.loom.registry``
keeps who they are and the tokenizer rule).

A part the :class:`~loomterm.engine.loom.facade.Loom` holds and delegates to; it owns
the registry (``Models``) and reaches the Loom only through the public
:class:`ModelsHost` (the tree, the lock, ``exclusive``, the context's ``assembly``) and the change notices' ``emit``,
handed to it when it is made. It keeps the active runner (``Loom.runner``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

from loomterm.engine.events import Event
from loomterm.engine.generation import NodeWriter
from loomterm.engine.kv.resident import KVBytes
from loomterm.engine.loom.events import Emit
from loomterm.errors import InputError
from loomterm.tree import Node, Tree

if TYPE_CHECKING:
    from loomterm.engine.context import Assembly
    from loomterm.engine.loom.registry import Models
    from loomterm.engine.open import RunnerOptions
    from loomterm.engine.runner import Runner


class ModelsHost(Protocol):
    """What the models part needs of the Loom: all of it public."""

    tree: Tree

    @property
    def lock(self) -> threading.RLock: ...

    def exclusive(self) -> contextlib.AbstractContextManager: ...

    def check_node(self, node: Node) -> None: ...

    def assembly(self, version: str | None = None) -> Assembly: ...


class KeepsNodeKV(Protocol):
    """A runner that can keep node KV and be told not to (``LocalRunner``)."""

    def without_node_kv(self) -> None: ...


class LoomModels:
    """Several models behind one Loom. See the module docstring.

    Attributes:
        registry: Who the models are, which one is active, who owns node KV.
        runner: The active model's runner (``Loom.runner``).
    """

    def __init__(self, loom: ModelsHost, registry: Models, emit: Emit) -> None:
        self.loom = loom
        self.registry = registry
        self.emit = emit
        self.runner = registry.runner()

    @property
    def model_table(self) -> dict[str, dict[str, Any]]:
        """Key to record (``registry.model_record``) of every model that wrote or may
        write into this tree, attached or only recorded; the session file keeps it."""
        return self.registry.table()

    def kv_bytes(self) -> KVBytes:
        """Resident KV: ``.nodes`` (stored on nodes), ``.working`` (the working buffer)
        and ``.total``, over every attached model. Safe from any thread without waiting
        for an operation."""
        runners = self.registry.runners()
        if len(runners) == 1:  # the active one
            return self.runner.kv_bytes()
        parts = [runner.kv_bytes() for runner in runners.values()]
        return sum(parts, KVBytes())

    def evict(self, node: Node) -> None:
        """Drop ``node``'s KV, keeping its tokens; it is recomputed exactly when used."""
        with self.loom.exclusive():
            owner = self.kv_runner()
            if owner is not None:
                owner.evict(node)

    def each_runner(self) -> list[Runner]:
        """Every attached runner: tree changes that rename or drop what a working cache
        holds (split, merge, move) go to all of them."""
        return list(self.registry.runners().values())

    def kv_runner(self) -> Runner | None:
        """The runner of the model that keeps node KV, or None."""
        owner = self.registry.kv_owner
        return self.registry.runner(owner) if owner is not None else None

    def refresh(self, node: Node) -> Node:
        """Recompute, exactly, the KV of every approximate node on the path (and of
        everything after the first one). Returns ``node``."""
        with self.loom.exclusive():
            self.loom.check_node(node)
            owner = self.kv_runner()
            if owner is not None:
                with owner.context(self.loom.assembly()):  # every model sees one context
                    owner.refresh(node)
            if owner is not self.runner:
                self.runner.refresh(node)
            return node

    def attach(self, name: str | None, runner: Runner) -> str:
        """Add ``runner`` as a model of this loom (not made active); returns its key
        (``name``, or one made from the model's name). Refused, in one line, unless its
        tokenizer is the tree's (``registry.vocab_mismatch``). A local runner beside one
        that already keeps node KV runs without node KV (``without_node_kv``)."""
        with self.loom.lock:
            key = (name or "").strip() or self.registry.fresh_key(runner.name)
            if self.registry.key_of(runner) is not None:
                raise InputError(
                    f"that model is already attached as {self.registry.key_of(runner)}"
                )
            self.registry.check(key, runner)
            if runner.capabilities.node_kv:
                if self.registry.kv_owner is not None:
                    cast(KeepsNodeKV, runner).without_node_kv()
                else:
                    from loomterm.engine.kv.cache import split_kv

                    self.loom.tree.split_kv = split_kv
            slot = self.registry.add(key, runner, named=bool((name or "").strip()))
            if runner.capabilities.node_kv:
                self.registry.kv_owner = slot.key
            runner.attach(self.loom.tree, self.emit)
            self.emit(Event.MODELS, None)
            return slot.key

    def open_model(
        self,
        source: str,
        name: str | None = None,
        device: str = "auto",
        *,
        dtype: str = "auto",
        quant: str | None = "none",
        backend: str = "auto",
        threads: int | None = None,
        n_ctx: int | None = None,
        kv_budget: int | str | None = None,
        progress: Callable[..., None] | None = None,
        record: dict[str, Any] | None = None,
        **server: Any,
    ) -> str:
        """Load (a local model folder, ``.gguf`` file or name, on ``backend`` with
        ``threads``, in ``dtype``/``quant``, reporting to ``progress``) or connect to (a
        server URL) ``source`` and ``attach`` it; returns its key. ``server`` takes
        ``remote.connect``'s options; the road is ``engine.open`` (``device="auto"``:
        the active model's device). With ``record`` (a table entry being reopened) the
        model must still be the one the record names (its fingerprint), and ``auto``
        keeps the backend it recorded; otherwise ``auto``'s llama.cpp gives way to torch
        where llama.cpp's tokenizer is not the tree's. A model that cannot join is let
        go again, with the one-line error."""
        from loomterm.engine.loom.registry import model_record, same_record
        from loomterm.engine.open import RunnerOptions, open_runner

        if not isinstance(source, str) or not source.strip():
            raise InputError("name a model: a server URL, a local model folder or a name")
        if device == "auto":
            device = str(getattr(self.runner, "device", "auto"))
        options = RunnerOptions.of(
            backend=backend,
            threads=threads,
            device=device,
            dtype=dtype,
            quant=quant,
            n_ctx=n_ctx,
            kv_budget=kv_budget,
            **server,
        )
        recorded = None
        if record is not None and record.get("kind", "local") == "local":
            recorded = str(record.get("backend") or "torch")
        runner = open_runner(source.strip(), options, progress, recorded)
        if options.backend == "auto" and recorded is None and runner.backend == "llama.cpp":
            runner = self._fitting(runner, source.strip(), options, progress)
        try:
            if record is not None and not same_record(record, model_record(runner)):
                raise InputError(
                    f"{source} now holds another model than the one that wrote this tree "
                    "(its fingerprint differs)"
                )
            return self.attach(name, runner)
        except BaseException:
            runner.close()
            raise

    def _fitting(
        self,
        runner: Runner,
        source: str,
        options: RunnerOptions,
        progress: Callable[..., None] | None,
    ) -> Runner:
        """``runner`` (auto's llama.cpp choice) when its tokenizer is the tree's, else
        ``source`` opened again on torch: llama.cpp's tokenizer can split text otherwise
        than transformers' for the same file; torch reads it as the tree's."""
        from loomterm.engine.loom.registry import vocab_key, vocab_mismatch
        from loomterm.engine.open import open_runner

        with self.loom.lock:
            fits = vocab_mismatch(self.registry.tree_vocab(), vocab_key(runner)) is None
        if fits:
            return runner
        runner.close()
        return open_runner(source, options.but(backend="torch"), progress)

    @property
    def model_state(self) -> dict[str, Any]:
        """``{"active": key, "attached": [keys]}``: which models were attached (or
        wanted but not reopened) and which was active; the session file keeps it beside
        the table so a reopened session can come back as it was (``reopen_models``)."""
        return self.registry.state()

    @property
    def model_notes(self) -> dict[str, str]:
        """Key to why, for each recorded model that ``reopen_models`` could not reopen."""
        return {k: s.missing for k, s in self.registry.recorded().items() if s.missing}

    def reopen_models(
        self,
        keys: Sequence[str] | None = None,
        progress: Callable[..., None] | None = None,
        on_note: Callable[[str], None] | None = None,
        loaded: Sequence[Any] = (),
        threads: int | None = None,
    ) -> list[str]:
        """Attach again, under their recorded keys, the recorded models ``keys`` names
        (None: the wanted ones, those the session had attached) that can be reopened (``registry.reopen_plan``): a
        local one loaded in its recorded dtype and quant on the active model's device,
        reporting to ``progress`` (stages named ``KEY: stage``), a server connected to
        and checked against its recorded fingerprint. A model among ``loaded``
        (``LoadedModel``s already in memory) with the record's source and fingerprint
        is used as it is. One that cannot come back stays recorded, its nodes
        untouched, and gets a one-line note (``on_note`` hears each as it happens,
        besides ``model_notes``); returns the notes, in order. ``threads``: the CPU
        threads of each local one (``engine.open``; default: its default)."""
        from loomterm.engine.loom.registry import reopen_plan
        from loomterm.errors import LoomError

        wanted = self.registry.recorded()
        if keys is None:
            keys = [k for k, slot in wanted.items() if slot.wanted]
        order = [k for k in keys if k in wanted]
        notes: list[str] = []
        for key in order:
            slot = wanted[key]
            name = slot.record.get("name") or key
            who = key if name == key else f"{key} ({name})"
            try:
                plan = reopen_plan(slot.record)
                if plan.local:
                    match = _loaded_for(slot.record, loaded)
                    if match is not None:  # already in memory (the editor's last session)
                        from loomterm.engine.open import RunnerOptions, runner_for

                        self.attach(key, runner_for(match, RunnerOptions(threads=threads)))
                        continue
                    options = dict(plan.options, progress=_prefixed(progress, key))
                    options["threads"] = threads
                else:
                    options = plan.options
                self.open_model(plan.source, key, record=slot.record, **options)
            except (LoomError, OSError, ValueError, RuntimeError) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                slot.missing = reason
                note = f"model {who} was not re-attached: {reason}; its branches stay, recorded"
                notes.append(note)
                if on_note is not None:
                    on_note(note)
        return notes

    def use(self, name: str) -> Runner:
        """Make the attached model ``name`` the active one; returns its runner."""
        with self.loom.lock:
            runner = self.registry.runner(name)
            self.registry.active = name
            self.registry.wanted_active = None
            self.runner = runner
            self.emit(Event.MODELS, None)
            return runner

    def detach(self, name: str) -> None:
        """Close and drop the attached model ``name`` (not the active one, nor the one
        keeping node KV); the nodes it wrote keep its key, and the table its record."""
        with self.loom.lock:
            runner = self.registry.runner(name)
            if name in (self.registry.active, self.registry.kv_owner):
                raise InputError(
                    f"{name} is the active model or keeps the node KV: use another first"
                )
            self.registry.drop(name)
            runner.close()
            self.emit(Event.MODELS, None)

    def adopt_models(
        self, table: dict[str, dict[str, Any]], state: dict[str, Any] | None = None
    ) -> None:
        """Take in the model table a session file recorded (``Session.open`` does) and
        its ``model_state``: the models it names as attached are wanted back
        (``reopen_models``); a file without a state wants every one."""
        attached, active = (state or {}).get("attached"), (state or {}).get("active")
        with self.loom.lock:
            self.registry.adopt(
                table or {},
                [str(k) for k in attached] if isinstance(attached, list) else None,
                active if isinstance(active, str) else None,
            )


def _loaded_for(record: dict[str, Any], loaded: Sequence[Any]) -> Any:
    """The model among ``loaded`` that ``record`` names (source, fingerprint and
    precision), or None."""
    from loomterm.engine.loom.registry import record_precision, same_record

    want = record_precision(record)
    for model in loaded:
        identity = model.identity()
        if same_record(record, identity) and record_precision(identity) == want:
            return model
    return None


def _prefixed(
    progress: Callable[..., None] | None, key: str
) -> Callable[[str, int, int | None], None] | None:
    """``progress`` with each stage named after the model it loads (``KEY: load``)."""
    if progress is None:
        return None
    return lambda stage, done, total: progress(f"{key}: {stage}", done, total)


class ModelWriter(NodeWriter):
    """A NodeWriter whose children carry the key of the model writing them."""

    def __init__(
        self, tree: Tree, emit: Callable[[str, Node | None], None], meta: dict[str, Any]
    ) -> None:
        super().__init__(tree, emit)
        self.meta = meta
