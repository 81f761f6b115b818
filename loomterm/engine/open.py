"""One road from a model source to a runner.

Every place that turns a model value into something that computes goes through here:
``Loom.load``, a session being opened or made (``session.Session.open``,
``sessions.opening.SessionOpening``), its other models coming back (``sessions.models``,
``Loom.reopen_models``), ``--attach``, the editor's Attach model, and the bench. So every
option means the same on every road:

- ``backend``: ``"torch"`` (transformers in this process, ``engine.local``),
  ``"llama.cpp"`` (a ``.gguf`` file in llama.cpp, in this process, ``engine.llamacpp``) or
  ``"auto"``: a server URL connects to the server; a ``.gguf`` file runs on llama.cpp when
  its library is built or installed (``llamacpp.binding.available``), on torch otherwise;
  anything else (a folder, a hub id, the default model) on torch. A session reopened
  with ``auto`` keeps the backend it recorded.
- ``threads``: CPU threads of either local backend (``threads.default_threads`` when not
  given: see there why).
- ``device``, ``dtype``, ``quant``: how torch holds the weights (llama.cpp takes the
  file's own quantization; a server its own).
- ``n_ctx``, ``kv_budget``: the context window and the resident KV cap, on both local
  backends.
- ``server``: ``remote.connect``'s options, for a server URL only.

``load`` is the heavy half (a torch model comes back loaded but not yet a runner, so a
session may re-tokenize its tree with it first); ``runner_for`` makes the runner;
``open_runner`` does both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from loomterm.errors import InputError

if TYPE_CHECKING:
    from loomterm.engine.models.load import LoadedModel
    from loomterm.engine.runner import Progress, Runner

BACKENDS = ("auto", "torch", "llama.cpp")
SERVER = "server"  # what ``choose_backend`` says for a server URL


@dataclass(frozen=True)
class RunnerOptions:
    """How to open a model source: see the module docstring for each field."""

    backend: str = "auto"
    threads: int | None = None
    device: str = "auto"
    dtype: str = "auto"
    quant: str | None = "none"
    n_ctx: int | None = None
    kv_budget: int | str | None = None
    server: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise InputError(f"backend {self.backend!r}: use one of {', '.join(BACKENDS)}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise InputError(f"threads {self.threads!r}: give a whole number of at least 1")

    @classmethod
    def of(cls, **options: Any) -> RunnerOptions:
        """The options among ``options`` (an ``EngineOptions.load_kwargs()``, a call's
        keyword arguments); ``server_kind``, ``server_model`` and the other
        ``remote.connect`` options go to ``server`` when given (not None)."""
        fields = {name: options.pop(name) for name in list(options) if name in _FIELDS}
        server = dict(fields.pop("server", None) or {})
        server.update({k: v for k, v in options.items() if v is not None and k != "model"})
        return cls(**fields, server=server)

    def but(self, **changes: Any) -> RunnerOptions:
        """These options with ``changes``."""
        return replace(self, **changes)

    def for_another(self, source: str) -> dict[str, Any]:
        """``Loom.open_model``'s options for another model attached beside the one
        opened with these (the editor's Attach model): the same backend choice,
        threads, dtype and quant; none for a server URL (its own backend)."""
        from loomterm.engine.remote import is_server_url

        if is_server_url(source):
            return {}
        return {
            "backend": self.backend,
            "threads": self.threads,
            "dtype": self.dtype,
            "quant": self.quant,
        }


_FIELDS = frozenset(RunnerOptions.__dataclass_fields__)


def is_gguf(source: str | None) -> bool:
    """Whether ``source`` names a ``.gguf`` file (there or not)."""
    return isinstance(source, str) and source.strip().lower().endswith(".gguf")


def llama_available() -> bool:
    """Whether the llama.cpp library and binding can be loaded here (built or
    installed), without loading them."""
    from loomterm.engine.llamacpp import binding

    return binding.available()


def choose_backend(source: str | None, backend: str = "auto", recorded: str | None = None) -> str:
    """What runs ``source``: ``"torch"``, ``"llama.cpp"`` or ``SERVER``. ``recorded``:
    the backend a session recorded for it (``auto`` keeps it). One line
    (:class:`InputError`) for a backend a source cannot take."""
    from loomterm.engine.remote import is_server_url

    if backend not in BACKENDS:
        raise InputError(f"backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if is_server_url(source):
        if backend != "auto":
            raise InputError(f"backend {backend}: a server URL is its own backend")
        return SERVER
    if backend != "auto":
        return backend
    if recorded in ("torch", "llama.cpp"):
        return recorded
    if is_gguf(source) and llama_available():
        return "llama.cpp"
    return "torch"


def load(
    source: str | None,
    options: RunnerOptions = RunnerOptions(),
    progress: Progress | None = None,
    recorded: str | None = None,
) -> LoadedModel | Runner:
    """The heavy half: a server connected to, a llama.cpp runner, or a torch model
    loaded (a ``LoadedModel``: ``runner_for`` makes its runner). Threads are set for
    the backend chosen (``threads.use_threads``)."""
    from loomterm.engine.threads import use_threads

    backend = choose_backend(source, options.backend, recorded)
    if backend != SERVER and options.server:
        raise InputError(f"{', '.join(sorted(options.server))}: only for a server URL as the model")
    if backend == SERVER:
        from loomterm.engine.remote import connect

        return connect(source, **dict(options.server))
    threads = use_threads(backend, options.threads)
    if backend == "llama.cpp":
        from loomterm.engine.llamacpp import open_gguf

        return open_gguf(
            source,
            n_ctx=options.n_ctx,
            threads=threads,
            progress=progress,
            kv_budget=options.kv_budget,
        )
    from loomterm.engine.models.load import load_model

    return load_model(
        source,
        device=options.device,
        dtype=options.dtype,
        progress=progress,
        quant=options.quant,
    )


def runner_for(model: LoadedModel | Runner, options: RunnerOptions = RunnerOptions()) -> Runner:
    """The runner of what ``load`` gave: a loaded torch model gets its local runner
    (``n_ctx``, ``kv_budget``); a runner is returned as it is. Either keeps ``options``
    (``runner.options``: what a model attached beside it starts from)."""
    from loomterm.engine.models.load import LoadedModel

    if not isinstance(model, LoadedModel):
        model.options = options
        return model
    from loomterm.engine.local.runner import LocalRunner
    from loomterm.engine.threads import default_threads

    runner = LocalRunner(model, n_ctx=options.n_ctx, kv_budget=options.kv_budget)
    if runner.threads is not None:  # on the CPU: kept per runner, set on each use
        runner.threads = options.threads or default_threads("torch")
    runner.options = options
    return runner


def open_runner(
    source: str | None,
    options: RunnerOptions = RunnerOptions(),
    progress: Progress | None = None,
    recorded: str | None = None,
) -> Runner:
    """``source`` (a server URL, a ``.gguf`` file, a model folder, a hub id; None: the
    default model) opened with ``options`` as a runner."""
    if isinstance(source, str):
        source = source.strip() or None
    return runner_for(load(source, options, progress, recorded), options)


def backend_of(runner: Any) -> str:
    """The backend a runner runs on, for a status line: ``torch``, ``llama.cpp`` or
    ``server``."""
    return str(getattr(runner, "backend", SERVER))


def runner_like(runner: Any) -> Runner:
    """A fresh torch runner on ``runner``'s loaded model, with its context window, KV
    cap, threads and options (a new session on the model in memory)."""
    from loomterm.engine.local.runner import LocalRunner

    fresh = LocalRunner(runner.loaded, n_ctx=runner.n_ctx, kv_budget=runner.kv_budget)
    fresh.threads = runner.threads
    fresh.options = runner.options
    return fresh
