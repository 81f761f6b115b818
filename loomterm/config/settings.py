"""Every setting of a session, and the engine options, each with its default once.

Two frozen dataclasses, each its own table: one line per field declares its default, its
allowed values and the one-line description the settings dialog shows.

- :class:`Settings`: what a session keeps (the sampling knobs, ``max_new_tokens``,
  ``n``, the splice mode, drafting...). ``settings.replace(**changes)`` validates; a bad
  key or value raises a one-line :class:`SettingError`. :meth:`Settings.from_stored`
  reads what older versions saved, and says what it had to change.
- :class:`EngineOptions`: how a model is loaded (``--model``, ``--device``, ``--dtype``,
  ``--n-ctx``, ``--kv-budget``), built once from the command line.

Adding a sampler is one line in :class:`Settings` declared with :func:`sampler` (its
name as llama.cpp spells it, and the same field in ``engine.sample.chain.SamplingParams``);
adding an engine option is one line in :class:`EngineOptions` declared with
:func:`option`. Strings from a dialog or the command line go through :func:`parse`.
How a field is declared and checked (:class:`Spec`, :func:`setting`...) lives in
:mod:`loomterm.config.specs`; this module re-exports it.

Standard library and ``loomterm.errors`` only: no torch here, so the CLI parser, the
session store and the UI can all use it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from loomterm.config.injection import check_world_info

# How a field is declared and checked lives in ``config.specs``; its names are
# re-exported here, where code and tests have always imported them from.
from loomterm.config.specs import (  # noqa: F401 - re-exported
    FALSE_WORDS,
    KINDS,
    META_KEY,
    NEVER,
    TRUE_WORDS,
    SettingError,
    Spec,
    collect_specs,
    field_kind,
    name_hint,
    number_text,
    option,
    parse_bias,
    parse_list,
    replace_fields,
    sampler,
    setting,
    unknown_name,
    validate_fields,
)

__all__ = [
    "DEFAULTS",
    "EngineOptions",
    "SettingError",
    "Settings",
    "Spec",
    "option",
    "parse",
    "sampler",
    "setting",
]


# -- the session's settings --------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """A session's settings, validated. Change them with :meth:`replace`.

    Read them as attributes (``settings.temperature``). A Settings is also a read-only
    mapping (``settings["n"]``, ``dict(settings)``, ``**settings``), so code written for
    the old settings dict keeps reading it.
    """

    # -- sampling knobs: llama.cpp's names; each is a field of SamplingParams ----------
    temperature: float = sampler(1.0, "Temperature", "softmax temperature; 0 is greedy", at_least=0)
    top_p: float = sampler(1.0, "Top-p", "keep the likeliest tokens up to this much probability; 1 is off", above=0, at_most=1)  # fmt: skip
    top_k: int = sampler(0, "Top-k", "keep only the k likeliest tokens; 0 is off", at_least=0)
    min_p: float = sampler(0.0, "Min-p", "drop tokens less likely than this share of the likeliest; 0 is off", at_least=0, below=1)  # fmt: skip
    repetition_penalty: float = sampler(1.0, "Repetition penalty", "make tokens already in the text less likely; 1 is off", above=0)  # fmt: skip
    presence_penalty: float = sampler(0.0, "Presence penalty", "subtract this from every token already in the last penalty_last_n; 0 is off", at_least=-2, at_most=2)  # fmt: skip
    frequency_penalty: float = sampler(0.0, "Frequency penalty", "subtract this times each token's count in the last penalty_last_n; 0 is off", at_least=-2, at_most=2)  # fmt: skip
    penalty_last_n: int = sampler(-1, "Penalty window", "tokens the penalties look back over; -1 the whole path, 0 none", at_least=-1)  # fmt: skip
    typical_p: float = sampler(1.0, "Typical-p", "locally typical sampling: keep the most typical tokens up to this mass; 1 is off", above=0, at_most=1)  # fmt: skip
    top_n_sigma: float = sampler(-1.0, "Top-n-sigma", "keep tokens whose logit is within n standard deviations of the best; -1 (or 0) is off", at_least=-1)  # fmt: skip
    xtc_probability: float = sampler(0.0, "XTC probability", "chance per token to exclude the top choices; 0 is off", at_least=0, at_most=1)  # fmt: skip
    xtc_threshold: float = sampler(0.1, "XTC threshold", "XTC removes all tokens at least this likely but the least likely of them", at_least=0, at_most=1)  # fmt: skip
    dry_multiplier: float = sampler(0.0, "DRY multiplier", "DRY: penalise tokens that would repeat a run of the text; 0 is off", at_least=0)  # fmt: skip
    dry_base: float = sampler(1.75, "DRY base", "DRY's penalty grows as multiplier * base^(length - allowed length)", at_least=1)  # fmt: skip
    dry_allowed_length: int = sampler(2, "DRY allowed length", "repeats up to this long are not penalised", at_least=0)  # fmt: skip
    dry_penalty_last_n: int = sampler(-1, "DRY window", "tokens DRY looks back over; -1 the whole path, 0 none", at_least=-1)  # fmt: skip
    dry_sequence_breakers: tuple[str, ...] = sampler(("\n", ":", '"', "*"), "DRY sequence breakers", "a repeat never runs across these strings")  # fmt: skip
    mirostat: int = sampler(0, "Mirostat", "0 off, 2 mirostat v2 (replaces top-n-sigma, top-k, top-p, min-p, typical and XTC)", choices=(0, 2))  # fmt: skip
    mirostat_tau: float = sampler(5.0, "Mirostat tau", "mirostat's target surprise, in bits", at_least=0)  # fmt: skip
    mirostat_eta: float = sampler(0.1, "Mirostat eta", "mirostat's learning rate", at_least=0)  # fmt: skip
    dynatemp_range: float = sampler(0.0, "Dynamic temperature range", "temperature varies by +- this with the entropy; 0 is off", at_least=0)  # fmt: skip
    dynatemp_exponent: float = sampler(1.0, "Dynamic temperature exponent", "how the entropy maps onto the range", at_least=0)  # fmt: skip
    logit_bias: dict[str, float | str] = sampler({}, "Logit bias", 'per token id or text: a bias, or "never" (e.g. "the":-2, 50256:never)')  # fmt: skip
    # -- generation and the engine ---------------------------------------------------
    preset: str = setting("", "Preset", "the sampler preset these settings started from (loomterm.config.presets)", dialog=False)  # fmt: skip
    banned_strings: tuple[str, ...] = setting((), "Banned phrases", "phrases a continuation never contains: decoding goes back and samples again")  # fmt: skip
    banned_strings_ignore_case: bool = setting(False, "Ban ignoring case", "match banned phrases without regard to case")  # fmt: skip
    max_new_tokens: int = setting(128, "Max new tokens", "tokens per generation (ctrl+g, ctrl+n)", at_least=1, at_most=100_000)  # fmt: skip
    n: int = setting(4, "N (siblings per ctrl+n)", "continuations ctrl+n makes at once", at_least=1, at_most=64)  # fmt: skip
    splice_mode: str = setting("fast", "Splice mode", "after an edit: fast re-ropes the KV kept (approximate), exact recomputes it", choices=("fast", "exact"))  # fmt: skip
    kv_snapshot: bool = setting(False, "KV snapshot", "keep a snapshot of the KV beside the session file", dialog=False)  # fmt: skip
    memory: str = setting("", "Memory", "text the model sees before the document in every request, kept when the window shifts", dialog=False)  # fmt: skip
    authors_note: str = setting("", "Author's note", "text the model sees authors_note_depth lines from the end of the path", dialog=False)  # fmt: skip
    authors_note_depth: int = setting(3, "Author's note depth", "lines from the end where the author's note goes; 0 is after the last token", at_least=0, at_most=100_000, dialog=False)  # fmt: skip
    world_info: dict[str, Any] = setting({"scan_depth": 64, "entries": []}, "World info", 'entries of keys and text, added when a key is in the last scan_depth tokens: {"scan_depth": 64, "entries": [{"keys": ["Ada"], "text": "..."}]}', dialog=False, check_with=check_world_info)  # fmt: skip
    drafting: str = setting("auto", "Drafting", "drafted decoding of a single continuation", choices=("auto", "tree", "lookahead", "off"), legacy={True: "auto", "on": "auto", False: "off", None: "off"}, dialog=False)  # fmt: skip
    token_healing: str = setting("auto", "Token healing", "text typed up to the middle of a word: the model spells the word's typed tokens again, so it can finish the word; auto heals where the model expects the word to go on (not after a whole word), on always, off never", choices=("auto", "on", "off"), legacy={True: "on", False: "off"})  # fmt: skip
    think_ahead: str = setting("auto", "Think ahead", "while you pause, write the siblings ctrl+r or ctrl+n would ask for out of sight, so the key shows them at once: auto is on for local models (torch, llama.cpp), off for servers", choices=("auto", "on", "off"))  # fmt: skip
    think_ahead_pause: float = setting(1.5, "Think-ahead pause", "seconds without a key before thinking ahead", at_least=0.2, at_most=60)  # fmt: skip

    SPECS: ClassVar[dict[str, Spec]]

    def __post_init__(self) -> None:
        validate_fields(self, self.SPECS)

    # -- changing ----------------------------------------------------------------------
    def replace(self, **changes: Any) -> Settings:
        """These settings with ``changes``, validated: an unknown name or a bad value
        raises :class:`SettingError` (one line, naming the setting and what it takes)."""
        return replace_fields(self, self.SPECS, changes, "setting")

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any] | None) -> tuple[Settings, list[str]]:
        """Settings from what a session file holds, perhaps from an older version, and a
        warning line for each thing changed on the way.

        Values older versions wrote map to today's (``drafting: true`` is ``"auto"``;
        those are not changes and get no warning). An unknown key is dropped and an
        invalid value replaced by the default, each with a warning. Missing keys take
        their default.
        """
        if isinstance(stored, Settings):
            return stored, []
        if stored is None:
            return cls(), []
        if not isinstance(stored, Mapping):
            return cls(), [f"the stored settings are not a table ({stored!r}): using the defaults"]
        values: dict[str, Any] = {}
        warnings: list[str] = []
        for name, raw in stored.items():
            spec = cls.SPECS.get(name)
            if spec is None:
                hint = name_hint(str(name), cls.SPECS)
                warnings.append(f"dropped the unknown stored setting {name!r} ({hint})")
                continue
            try:
                raw = spec.legacy.get(raw, raw)
            except TypeError:  # unhashable: not a legacy value
                pass
            try:
                values[name] = spec.check(raw)
            except SettingError as exc:
                warnings.append(f"stored setting {exc}: using the default {spec.default!r}")
        return cls(**values), warnings

    # -- reading -----------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        """Every setting, JSON-ready (what a session file keeps)."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in ((name, getattr(self, name)) for name in self.SPECS)
        }

    def sampling(self) -> dict[str, Any]:
        """The sampling knobs as keyword arguments (``SamplingParams(**s.sampling())``,
        ``loom.generate(node, n, **s.sampling())``)."""
        return {name: getattr(self, name) for name, spec in self.SPECS.items() if spec.sampling}

    @classmethod
    def spec(cls, name: str) -> Spec:
        """The spec of one setting; :class:`SettingError` for an unknown name."""
        try:
            return cls.SPECS[name]
        except KeyError:
            raise unknown_name(name, cls.SPECS) from None


Settings.SPECS = collect_specs(Settings)
DEFAULTS = Settings()


def parse(name: str, text: str) -> Any:
    """The value of setting ``name`` typed as ``text`` (a dialog field, a command-line
    argument): ``parse("top_k", "40") == 40``. Raises :class:`SettingError`."""
    return Settings.spec(name).parse(text)


# -- engine options ----------------------------------------------------------------------


@dataclass(frozen=True)
class EngineOptions:
    """How to load the model and size the engine: built once from the command line
    (:meth:`from_args`) and handed whole to whatever loads a model."""

    model: str | None = option(None, "local HF folder, .gguf file, hub id, or a server's URL such as http://127.0.0.1:8080 (default: SmolLM2-135M-Instruct)", part="model")  # fmt: skip
    device: str = option("auto", "auto, cuda, mps or cpu", part="model")
    dtype: str = option("auto", "auto, float32, bfloat16 or float16", part="model")
    quant: str = option("none", "weight quantization: none (exact), f16 (float16 weights, float32 products: near exact, about 2x float32's decode on an x86 CPU), int8 (weight-only, per channel) or int4 (weight-only, groups of 32, as Q4_1)", part="model", choices=("none", "f16", "int8", "int4"))  # fmt: skip
    n_ctx: int | None = option(None, "context window in tokens", part="loom", at_least=1)
    kv_budget: str | None = option(None, "cap on cached KV memory, e.g. 2G (default: half the free memory)", part="loom")  # fmt: skip
    backend: str = option("auto", "what runs a local model: torch (transformers in this process), llama.cpp (a .gguf file in llama.cpp, in this process) or auto (a .gguf file on llama.cpp once `loomterm build-llama` has built it, anything else on torch; a session reopens on the backend it was made on)", part="backend", choices=("auto", "torch", "llama.cpp"))  # fmt: skip
    threads: int | None = option(None, "CPU threads for the model, either backend (default: one per physical core less one, which keeps decoding fast when something else uses the CPU)", part="backend", at_least=1)  # fmt: skip
    server_kind: str | None = option(None, "with --model URL: the kind of server (default: detected); an API key comes from LOOMTERM_API_KEY or OPENAI_API_KEY", part="server", choices=("llama-server", "vllm", "sglang", "openai"))  # fmt: skip
    server_model: str | None = option(None, "with --model URL: the model on a multi-model server", part="server")  # fmt: skip

    SPECS: ClassVar[dict[str, Spec]]

    def __post_init__(self) -> None:
        validate_fields(self, self.SPECS)

    @classmethod
    def from_args(cls, args: Any) -> EngineOptions:
        """The options in an argparse namespace; those it lacks take their default."""
        return cls(**{name: getattr(args, name) for name in cls.SPECS if hasattr(args, name)})

    def replace(self, **changes: Any) -> EngineOptions:
        return replace_fields(self, self.SPECS, changes, "engine option")

    def model_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``load_model`` (and ``import_session``): model, device,
        dtype."""
        return self._part("model")

    def loom_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``Loom.from_loaded`` / ``Loom(...)``: n_ctx, kv_budget."""
        return self._part("loom")

    def server_kwargs(self) -> dict[str, Any]:
        """The ``--server-*`` options that were given (``server_kind``, ``server_model``)."""
        return {k: v for k, v in self._part("server").items() if v is not None}

    def load_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``Loom.load`` and ``open_loom``: every option."""
        return self.as_dict()

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.SPECS}

    def _part(self, part: str) -> dict[str, Any]:
        return {name: getattr(self, name) for name, spec in self.SPECS.items() if spec.part == part}


EngineOptions.SPECS = collect_specs(EngineOptions)
