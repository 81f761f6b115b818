"""How a setting is declared and checked: :class:`Spec` (one field's default, allowed
values and description), :func:`setting`, :func:`sampler` and :func:`option` to declare
fields, and the helpers that read a declared dataclass's specs and validate it.

The tables themselves (:class:`~loomterm.config.settings.Settings`,
:class:`~loomterm.config.settings.EngineOptions`) live in :mod:`loomterm.config.settings`, which
re-exports all of this. Standard library and ``loomterm.errors`` only.
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
from typing import Any, ClassVar, Protocol, TypeVar

from loomterm.errors import InputError

J = TypeVar("J", list, dict)  # what a JSON field may hold


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

KINDS = (bool, int, float, str, tuple, dict)
NEVER = "never"  # a logit bias that makes a token impossible
TRUE_WORDS = {"true", "yes", "on", "1"}
FALSE_WORDS = {"false", "no", "off", "0"}


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
                return f" from {number_text(low)} to {number_text(high)}"
            left = "[" if self.at_least is not None else "("
            right = "]" if self.at_most is not None else ")"
            return f" in {left}{number_text(low)}, {number_text(high)}{right}"
        if low is not None:
            return (
                f" >= {number_text(low)}" if self.at_least is not None else f" > {number_text(low)}"
            )
        if high is not None:
            return (
                f" <= {number_text(high)}"
                if self.at_most is not None
                else f" < {number_text(high)}"
            )
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
            if raw.lower() in TRUE_WORDS:
                return True
            if raw.lower() in FALSE_WORDS:
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
            value = parse_list(raw)
            if value is None:
                raise self.error(text)
        elif kind is dict:
            value = parse_bias(raw)
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


def number_text(value: float) -> str:
    return f"{value:g}"


def json_of(raw: str, kind: type[J]) -> J | None:
    """``raw`` read as JSON, if it is valid and a ``kind``; else None."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, kind) else None


def parse_list(raw: str) -> list[str] | None:
    """A JSON list of strings, or comma-separated words."""
    if raw.startswith("["):
        return json_of(raw, list)
    return [part.strip() for part in raw.split(",") if part.strip()]


def parse_bias(raw: str) -> dict[str, Any] | None:
    """A JSON object, or ``key:bias`` pairs split by commas (``"the":-2, 50256:never``)."""
    if not raw:
        return {}
    if raw.startswith("{"):
        return json_of(raw, dict)
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

META_KEY = "loomterm.spec"


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
            META_KEY: dict(
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
    (``load_model``), ``"loom"`` (the Loom built on the loaded model), ``"server"``
    (a server's runner) or ``"backend"`` (``Loom.load``: which runner, its threads)."""
    if part not in ("model", "loom", "server", "backend"):
        raise ValueError(f"part must be 'model', 'loom', 'server' or 'backend', not {part!r}")
    return field(
        default=default,
        metadata={
            META_KEY: dict(label="", help=help, at_least=at_least, choices=choices, part=part)
        },
    )


def collect_specs(cls: type) -> dict[str, Spec]:
    """The specs of a dataclass declared with :func:`setting` / :func:`option`."""
    hints = typing.get_type_hints(cls)
    specs: dict[str, Spec] = {}
    for f in dataclasses.fields(cls):
        kind, optional = field_kind(hints[f.name], f.name)
        meta = dict(f.metadata[META_KEY])
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


def field_kind(hint: Any, name: str) -> tuple[type, bool]:
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
    if kind not in KINDS:
        raise TypeError(f"setting {name}: {hint} is not one of bool, int, float, str, tuple, dict")
    return kind, optional


def name_hint(name: str, specs: Mapping[str, Spec]) -> str:
    close = difflib.get_close_matches(name, list(specs), n=1)
    return f"did you mean {close[0]}?" if close else "known: " + ", ".join(specs)


def unknown_name(name: str, specs: Mapping[str, Spec], what: str = "setting") -> SettingError:
    return SettingError(name, "is unknown", f"unknown {what} {name!r} ({name_hint(name, specs)})")


def validate_fields(obj: Any, specs: Mapping[str, Spec]) -> None:
    for name, spec in specs.items():
        value = spec.check(getattr(obj, name))
        object.__setattr__(obj, name, value)  # frozen: the normalized value


class Fielded(Protocol):
    """A dataclass instance, as ``dataclasses.replace`` takes one."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


_T = TypeVar("_T", bound=Fielded)


def replace_fields(obj: _T, specs: Mapping[str, Spec], changes: Mapping[str, Any], what: str) -> _T:
    for name in changes:
        if name not in specs:
            raise unknown_name(name, specs, what)
    return dataclasses.replace(obj, **changes)
