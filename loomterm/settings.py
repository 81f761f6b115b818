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
name as llama.cpp spells it, and the same field in ``engine.sampling.SamplingParams``);
adding an engine option is one line in :class:`EngineOptions` declared with
:func:`option`. Strings from a dialog or the command line go through :func:`parse`.

Standard library and ``loomterm.errors`` only: no torch here, so the CLI parser, the
session store and the UI can all use it cheaply.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from loomterm.errors import InputError
from loomterm.injection import check_world_info

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


class SettingError(InputError):
    """A setting that does not exist, or a value it cannot take. One line.

    ``setting`` is the name; ``problem`` the message without it (``"must be one of
    fast, exact (got 'fastest')"``), for a dialog that names the setting its own way.
    """

    def __init__(self, setting: str, problem: str, message: str | None = None) -> None:
        super().__init__(message or f"{setting} {problem}")
        self.setting = setting
        self.problem = problem


# -- the spec of one field ------------------------------------------------------------

_KINDS = (bool, int, float, str, tuple, dict)
NEVER = "never"  # a logit bias that makes a token impossible
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


@dataclass(frozen=True, eq=False)  # one per field: compared and hashed by identity
class Spec:
    """What one field accepts: kind, range or choices, and its description.

    ``kind`` is bool, int, float, str or tuple (a tuple of strings), from the field's
    annotation; ``optional`` when the annotation allows None. Bounds: ``at_least`` /
    ``above`` below, ``at_most`` / ``below`` above (inclusive / exclusive).
    """

    name: str
    kind: type
    default: Any
    help: str
    label: str
    optional: bool = False
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] | None = None
    legacy: Mapping[Any, Any] = field(default_factory=dict)
    sampling: bool = False
    dialog: bool = True
    part: str = ""
    check_with: Any = None  # a validator of its own: value -> value, ValueError(problem)

    # -- the rule, in words ----------------------------------------------------------
    @property
    def rule(self) -> str:
        """What a good value is, e.g. ``a number in (0, 1]``, ``one of fast, exact``."""
        if self.choices is not None:
            text = "one of " + ", ".join(str(c) for c in self.choices)
        elif self.kind is bool:
            text = "true or false"
        elif self.kind is tuple:
            text = "a list of strings"
        elif self.kind is dict:
            text = "a table of token or text to a bias or never"
        elif self.kind is str:
            text = "text"
        else:
            noun = "a whole number" if self.kind is int else "a number"
            text = f"{noun}{self._range()}"
        return f"{text} or none" if self.optional else text

    def _range(self) -> str:
        low = self.at_least if self.at_least is not None else self.above
        high = self.at_most if self.at_most is not None else self.below
        if low is not None and high is not None:
            if self.kind is int and self.at_least is not None and self.at_most is not None:
                return f" from {_num(low)} to {_num(high)}"
            left = "[" if self.at_least is not None else "("
            right = "]" if self.at_most is not None else ")"
            return f" in {left}{_num(low)}, {_num(high)}{right}"
        if low is not None:
            return f" >= {_num(low)}" if self.at_least is not None else f" > {_num(low)}"
        if high is not None:
            return f" <= {_num(high)}" if self.at_most is not None else f" < {_num(high)}"
        return ""

    def error(self, value: Any) -> SettingError:
        return SettingError(self.name, f"must be {self.rule} (got {value!r})")

    # -- checking and parsing --------------------------------------------------------
    def check(self, value: Any) -> Any:
        """``value`` in this field's own type (an int for a float field becomes a float,
        a list for a tuple field a tuple), or :class:`SettingError`."""
        if value is None and self.optional:
            return None
        if self.check_with is not None:
            try:
                return self.check_with(value)
            except ValueError as exc:
                raise SettingError(self.name, str(exc)) from None
        kind = self.kind
        if kind is bool:
            if not isinstance(value, bool):
                raise self.error(value)
        elif kind is int or kind is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.error(value)
            if isinstance(value, float) and not math.isfinite(value):
                raise self.error(value)
            if kind is int and isinstance(value, float) and not value.is_integer():
                raise self.error(value)
            if not self._in_range(value):
                raise self.error(value)  # as given: "(got 0)", not "(got 0.0)"
            value = kind(value)
        elif kind is str:
            if not isinstance(value, str):
                raise self.error(value)
        elif kind is tuple:
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise self.error(value)
            value = tuple(value)
        elif kind is dict:
            value = self._check_bias(value)
        if self.choices is not None and value not in self.choices:
            raise self.error(value)
        return value

    def _check_bias(self, value: Any) -> dict[str, float | str]:
        """A logit-bias table: keys are token ids (digits) or text, values a number or
        ``"never"``."""
        if not isinstance(value, Mapping):
            raise self.error(value)
        out: dict[str, float | str] = {}
        for key, bias in value.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)) or key == "":
                raise self.error(value)
            number = isinstance(bias, (int, float)) and not isinstance(bias, bool)
            if not (bias == NEVER or (number and math.isfinite(bias))):
                raise self.error(value)
            out[str(key)] = bias if bias == NEVER else float(bias)
        return out

    def _in_range(self, value: float) -> bool:
        return not (
            (self.at_least is not None and value < self.at_least)
            or (self.above is not None and value <= self.above)
            or (self.at_most is not None and value > self.at_most)
            or (self.below is not None and value >= self.below)
        )

    def parse(self, text: str) -> Any:
        """The value typed as ``text`` (a dialog field, a command-line argument), checked."""
        raw = str(text).strip()
        if self.optional and raw.lower() in ("", "none"):
            return None
        kind = self.kind
        if kind is bool:
            if raw.lower() in _TRUE:
                return True
            if raw.lower() in _FALSE:
                return False
            raise self.error(text)
        if kind is int:
            try:
                value: Any = int(raw, 10)
            except ValueError:
                raise self.error(text) from None
        elif kind is float:
            try:
                value = float(raw)
            except ValueError:
                raise self.error(text) from None
        elif kind is tuple:
            value = _parse_list(raw)
            if value is None:
                raise self.error(text)
        elif kind is dict:
            value = _parse_bias(raw)
            if value is None:
                raise self.error(text)
        else:
            value = raw
            if self.choices is not None:
                folded = {str(c).lower(): c for c in self.choices}
                value = folded.get(raw.lower(), raw)
        return self.check(value)

    def text(self, value: Any) -> str:
        """``value`` as a dialog shows it (``parse`` reads it back)."""
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return f"{value:g}"
        if isinstance(value, tuple):
            return json.dumps(list(value))
        if isinstance(value, dict):
            return json.dumps(value, ensure_ascii=False)
        return str(value)


def _num(value: float) -> str:
    return f"{value:g}"


def _parse_list(raw: str) -> list[str] | None:
    """A JSON list of strings, or comma-separated words."""
    if raw.startswith("["):
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, list) else None
    return [part.strip() for part in raw.split(",") if part.strip()]


def _parse_bias(raw: str) -> dict[str, Any] | None:
    """A JSON object, or ``key:bias`` pairs split by commas (``"the":-2, 50256:never``)."""
    if not raw:
        return {}
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    out: dict[str, Any] = {}
    for part in raw.split(","):
        key, sep, bias = part.strip().rpartition(":")
        if not sep or not key:
            return None
        key = key.strip()
        if len(key) >= 2 and key[0] == key[-1] and key[0] in "\"'":
            key = key[1:-1]
        bias = bias.strip()
        try:
            out[key] = bias if bias == NEVER else float(bias)
        except ValueError:
            return None
    return out


# -- declaring fields -------------------------------------------------------------------

_META = "loomterm.spec"


def setting(
    default: Any,
    label: str,
    help: str,
    *,
    at_least: float | None = None,
    above: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    choices: tuple[Any, ...] | None = None,
    legacy: Mapping[Any, Any] | None = None,
    dialog: bool = True,
    sampling: bool = False,
    check_with: Any = None,
) -> Any:
    """A field of :class:`Settings`: its default, dialog label, one-line description and
    allowed values. ``legacy`` maps values older versions stored to today's."""
    default_kw = (
        {"default_factory": lambda: dict(default)}
        if isinstance(default, dict)
        else {"default": default}
    )
    return field(
        **default_kw,
        metadata={
            _META: dict(
                label=label,
                help=help,
                at_least=at_least,
                above=above,
                at_most=at_most,
                below=below,
                choices=choices,
                legacy=dict(legacy or {}),
                dialog=dialog,
                sampling=sampling,
                check_with=check_with,
            )
        },
    )


def sampler(default: Any, label: str, help: str, **rules: Any) -> Any:
    """A sampling knob: a :func:`setting` that is also a ``SamplingParams`` field."""
    return setting(default, label, help, sampling=True, **rules)


def option(
    default: Any,
    help: str,
    *,
    part: str,
    at_least: float | None = None,
    choices: tuple[Any, ...] | None = None,
) -> Any:
    """A field of :class:`EngineOptions`. ``part`` says who takes it: ``"model"``
    (``load_model``) or ``"loom"`` (the Loom built on the loaded model)."""
    if part not in ("model", "loom", "server"):
        raise ValueError(f"part must be 'model', 'loom' or 'server', not {part!r}")
    return field(
        default=default,
        metadata={_META: dict(label="", help=help, at_least=at_least, choices=choices, part=part)},
    )


def _specs(cls: type) -> dict[str, Spec]:
    """The specs of a dataclass declared with :func:`setting` / :func:`option`."""
    hints = typing.get_type_hints(cls)
    specs: dict[str, Spec] = {}
    for f in dataclasses.fields(cls):
        kind, optional = _kind(hints[f.name], f.name)
        meta = dict(f.metadata[_META])
        specs[f.name] = Spec(
            name=f.name,
            kind=kind,
            default=f.default if f.default_factory is dataclasses.MISSING else f.default_factory(),
            optional=optional,
            label=meta.pop("label") or f.name.replace("_", " ").capitalize(),
            **meta,
        )
    for spec in specs.values():
        spec.check(spec.default)  # a wrong default is a bug here, found at import
    return specs


def _kind(hint: Any, name: str) -> tuple[type, bool]:
    """(kind, optional) of an annotation such as ``float``, ``int | None``,
    ``tuple[str, ...]``."""
    optional = False
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            raise TypeError(f"setting {name}: one type (or it | None), not {hint}")
        hint = args[0]
    kind = typing.get_origin(hint) or hint
    if kind not in _KINDS:
        raise TypeError(f"setting {name}: {hint} is not one of bool, int, float, str, tuple, dict")
    return kind, optional


def _hint(name: str, specs: Mapping[str, Spec]) -> str:
    close = difflib.get_close_matches(name, list(specs), n=1)
    return f"did you mean {close[0]}?" if close else "known: " + ", ".join(specs)


def _unknown(name: str, specs: Mapping[str, Spec], what: str = "setting") -> SettingError:
    return SettingError(name, "is unknown", f"unknown {what} {name!r} ({_hint(name, specs)})")


def _validate(obj: Any, specs: Mapping[str, Spec]) -> None:
    for name, spec in specs.items():
        value = spec.check(getattr(obj, name))
        object.__setattr__(obj, name, value)  # frozen: the normalized value


_T = TypeVar("_T")


def _replace(obj: _T, specs: Mapping[str, Spec], changes: Mapping[str, Any], what: str) -> _T:
    for name in changes:
        if name not in specs:
            raise _unknown(name, specs, what)
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]


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
    xtc_probability: float = sampler(0.0, "XTC probability", "chance per token to exclude the top choices; 0 is off", at_least=0, at_most=1)  # fmt: skip
    xtc_threshold: float = sampler(0.1, "XTC threshold", "XTC removes all tokens at least this likely but the least likely of them", at_least=0, at_most=1)  # fmt: skip
    dry_multiplier: float = sampler(0.0, "DRY multiplier", "DRY: penalise tokens that would repeat a run of the text; 0 is off", at_least=0)  # fmt: skip
    dry_base: float = sampler(1.75, "DRY base", "DRY's penalty grows as multiplier * base^(length - allowed length)", at_least=1)  # fmt: skip
    dry_allowed_length: int = sampler(2, "DRY allowed length", "repeats up to this long are not penalised", at_least=0)  # fmt: skip
    dry_penalty_last_n: int = sampler(-1, "DRY window", "tokens DRY looks back over; -1 the whole path, 0 none", at_least=-1)  # fmt: skip
    dry_sequence_breakers: tuple[str, ...] = sampler(("\n", ":", '"', "*"), "DRY sequence breakers", "a repeat never runs across these strings")  # fmt: skip
    mirostat: int = sampler(0, "Mirostat", "0 off, 2 mirostat v2 (replaces top-k, top-p, min-p, typical and XTC)", choices=(0, 2))  # fmt: skip
    mirostat_tau: float = sampler(5.0, "Mirostat tau", "mirostat's target surprise, in bits", at_least=0)  # fmt: skip
    mirostat_eta: float = sampler(0.1, "Mirostat eta", "mirostat's learning rate", at_least=0)  # fmt: skip
    dynatemp_range: float = sampler(0.0, "Dynamic temperature range", "temperature varies by +- this with the entropy; 0 is off", at_least=0)  # fmt: skip
    dynatemp_exponent: float = sampler(1.0, "Dynamic temperature exponent", "how the entropy maps onto the range", at_least=0)  # fmt: skip
    logit_bias: dict[str, float | str] = sampler({}, "Logit bias", 'per token id or text: a bias, or "never" (e.g. "the":-2, 50256:never)')  # fmt: skip
    # -- generation and the engine ---------------------------------------------------
    preset: str = setting("", "Preset", "the sampler preset these settings started from (loomterm.presets)", dialog=False)  # fmt: skip
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

    SPECS: ClassVar[dict[str, Spec]]

    def __post_init__(self) -> None:
        _validate(self, self.SPECS)

    # -- changing ----------------------------------------------------------------------
    def replace(self, **changes: Any) -> Settings:
        """These settings with ``changes``, validated: an unknown name or a bad value
        raises :class:`SettingError` (one line, naming the setting and what it takes)."""
        return _replace(self, self.SPECS, changes, "setting")

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
                hint = _hint(str(name), cls.SPECS)
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
            raise _unknown(name, cls.SPECS) from None


Settings.SPECS = _specs(Settings)
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
    quant: str = option("none", "weight quantization: none (exact), int8 (weight-only, per channel) or int4 (weight-only, groups of 32, as Q4_1)", part="model", choices=("none", "int8", "int4"))  # fmt: skip
    n_ctx: int | None = option(None, "context window in tokens", part="loom", at_least=1)
    kv_budget: str | None = option(None, "cap on cached KV memory, e.g. 2G (default: half the free memory)", part="loom")  # fmt: skip
    server_kind: str | None = option(None, "with --model URL: the kind of server (default: detected); an API key comes from LOOMTERM_API_KEY or OPENAI_API_KEY", part="server", choices=("llama-server", "vllm", "sglang", "openai"))  # fmt: skip
    server_model: str | None = option(None, "with --model URL: the model on a multi-model server", part="server")  # fmt: skip

    SPECS: ClassVar[dict[str, Spec]]

    def __post_init__(self) -> None:
        _validate(self, self.SPECS)

    @classmethod
    def from_args(cls, args: Any) -> EngineOptions:
        """The options in an argparse namespace; those it lacks take their default."""
        return cls(**{name: getattr(args, name) for name in cls.SPECS if hasattr(args, name)})

    def replace(self, **changes: Any) -> EngineOptions:
        return _replace(self, self.SPECS, changes, "engine option")

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


EngineOptions.SPECS = _specs(EngineOptions)
