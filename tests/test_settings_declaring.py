"""Declaring settings (``setting``, ``sampler``, ``option``, and the specs read from a
dataclass), and the rules in words: the parts of ``loomterm/config/settings.py`` that run when
a settings class is defined, tested by defining classes here (the module's own classes
are built at import, before any test could see a change)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from loomterm.config import settings as S
from loomterm.config.settings import EngineOptions, SettingError, Settings, Spec


def knobs() -> type:
    """A settings class of its own, declared the way ``Settings`` is: defined when a test
    runs, so the declaring functions run under the test too."""

    @dataclass(frozen=True)
    class Knobs:
        max_new_tokens: int = S.setting(8, "", "how many", at_least=1, at_most=9)
        ratio: float = S.sampler(0.5, "Share", "a share", above=0, below=1)
        mode: str = S.setting("a", "Mode", "which", choices=("a", "b"), legacy={True: "a"}, dialog=False)  # fmt: skip
        words: tuple[str, ...] = S.setting(("x",), "Some words", "some words")
        table: dict[str, float | str] = S.sampler({"t": 1.0}, "Table", "a bias table")
        maybe: int | None = S.setting(None, "Maybe", "a count or none", at_least=0)

    return Knobs


def test_a_field_keeps_its_default_label_help_and_every_rule():
    specs = S.collect_specs(knobs())
    assert list(specs) == ["max_new_tokens", "ratio", "mode", "words", "table", "maybe"]
    got = {
        name: (
            spec.name,
            spec.kind,
            spec.default,
            spec.label,
            spec.help,
            spec.optional,
            (spec.at_least, spec.above, spec.at_most, spec.below),
            spec.choices,
            dict(spec.legacy),
            spec.sampling,
            spec.dialog,
            spec.part,
        )
        for name, spec in specs.items()
    }
    none4 = (None, None, None, None)
    assert got == {
        # An empty label is made from the name.
        "max_new_tokens": (
            "max_new_tokens",
            int,
            8,
            "Max new tokens",
            "how many",
            False,
            (1, None, 9, None),
            None,
            {},
            False,
            True,
            "",
        ),  # fmt: skip
        "ratio": (
            "ratio",
            float,
            0.5,
            "Share",
            "a share",
            False,
            (None, 0, None, 1),
            None,
            {},
            True,
            True,
            "",
        ),  # fmt: skip
        "mode": (
            "mode",
            str,
            "a",
            "Mode",
            "which",
            False,
            none4,
            ("a", "b"),
            {True: "a"},
            False,
            False,
            "",
        ),  # fmt: skip
        "words": (
            "words",
            tuple,
            ("x",),
            "Some words",
            "some words",
            False,
            none4,
            None,
            {},
            False,
            True,
            "",
        ),  # fmt: skip
        "table": (
            "table",
            dict,
            {"t": 1.0},
            "Table",
            "a bias table",
            False,
            none4,
            None,
            {},
            True,
            True,
            "",
        ),  # fmt: skip
        "maybe": (
            "maybe",
            int,
            None,
            "Maybe",
            "a count or none",
            True,
            (0, None, None, None),
            None,
            {},
            False,
            True,
            "",
        ),  # fmt: skip
    }


def test_a_table_default_is_a_fresh_copy_per_instance():
    field = S.setting({"a": 1.0}, "T", "t")
    assert field.default is dataclasses.MISSING
    first, second = field.default_factory(), field.default_factory()
    assert first == {"a": 1.0} and first is not second
    assert S.setting(3, "N", "n").default == 3


def test_options_say_who_takes_them():
    field = S.option(2, "how many", part="loom", at_least=1, choices=(1, 2))
    assert field.default == 2
    assert field.metadata[S.META_KEY] == dict(
        label="", help="how many", at_least=1, choices=(1, 2), part="loom"
    )
    for part in ("model", "loom", "server", "backend"):
        S.option(None, "x", part=part)
    with pytest.raises(
        ValueError, match=r"^part must be 'model', 'loom', 'server' or 'backend', not 'ui'$"
    ):
        S.option(None, "x", part="ui")
    specs = EngineOptions.SPECS
    assert specs["n_ctx"].label == "N ctx" and specs["n_ctx"].at_least == 1
    assert (
        specs["quant"].choices == ("none", "f16", "int8", "int4") and specs["quant"].part == "model"
    )
    assert specs["server_kind"].part == "server" and specs["kv_budget"].part == "loom"
    assert specs["backend"].part == "backend" and specs["threads"].part == "backend"


def test_the_module_s_specs_are_what_its_declarations_say():
    """Rebuilding the specs of Settings and EngineOptions gives the ones in use."""
    for cls in (Settings, EngineOptions):
        again = S.collect_specs(cls)
        assert list(again) == list(cls.SPECS)
        for name, spec in again.items():
            old = cls.SPECS[name]
            for f in dataclasses.fields(Spec):
                assert getattr(spec, f.name) == getattr(old, f.name), (name, f.name)


def test_a_wrong_default_is_found_when_the_class_is_defined():
    with pytest.raises(SettingError, match=r"^n must be a whole number >= 1 \(got 0\)$"):

        @dataclass(frozen=True)
        class Bad:
            n: int = S.setting(0, "N", "n", at_least=1)

        S.collect_specs(Bad)


@pytest.mark.parametrize(
    "hint, kind",
    [
        (float, (float, False)),
        (int | None, (int, True)),
        (tuple[str, ...], (tuple, False)),
        (dict[str, float | str], (dict, False)),
        (str | None, (str, True)),
        (bool, (bool, False)),
    ],
)
def test_kinds_from_annotations(hint, kind):
    assert S.field_kind(hint, "x") == kind


def test_annotations_that_are_no_kind_are_refused():
    with pytest.raises(TypeError, match=r"^setting x: one type \(or it \| None\), not "):
        S.field_kind(int | str, "x")
    with pytest.raises(TypeError, match=r"^setting y: .* is not one of bool, int, float, str"):
        S.field_kind(list[str], "y")
    with pytest.raises(TypeError, match="setting z: one type"):
        S.field_kind(int | str | None, "z")


def test_unknown_names_say_what_is_known():
    specs = {"alpha": None, "beta": None}
    err = S.unknown_name("alpah", specs)
    assert str(err) == "unknown setting 'alpah' (did you mean alpha?)"
    assert err.setting == "alpah" and err.problem == "is unknown"
    err = S.unknown_name("zzz", specs, "engine option")
    assert str(err) == "unknown engine option 'zzz' (known: alpha, beta)"
    with pytest.raises(SettingError, match=r"^unknown engine option 'n_cxt' \(did you mean n_ctx\?\)$"):  # fmt: skip
        EngineOptions().replace(n_cxt=3)


@pytest.mark.parametrize(
    "rules, kind, words",
    [
        (dict(at_least=0, at_most=64), int, "a whole number from 0 to 64"),
        (dict(at_least=0, at_most=1), float, "a number in [0, 1]"),
        (dict(above=0, at_most=1), float, "a number in (0, 1]"),
        (dict(at_least=0, below=1), float, "a number in [0, 1)"),
        (dict(above=0, below=1), int, "a whole number in (0, 1)"),
        (dict(at_least=-1), int, "a whole number >= -1"),
        (dict(above=0.5), float, "a number > 0.5"),
        (dict(at_most=2), float, "a number <= 2"),
        (dict(below=1e-3), float, "a number < 0.001"),
        (dict(), float, "a number"),
        (dict(choices=(0, 2)), int, "one of 0, 2"),
        (dict(), bool, "true or false"),
        (dict(), tuple, "a list of strings"),
        (dict(), dict, "a table of token or text to a bias or never"),
        (dict(), str, "text"),
    ],
)
def test_each_rule_in_words(rules, kind, words):
    spec = Spec(name="k", kind=kind, default=None, help="", label="", **rules)
    assert spec.rule == words
    optional = Spec(name="k", kind=kind, default=None, help="", label="", optional=True, **rules)
    assert optional.rule == words + " or none"
    assert str(spec.error("v")) == f"k must be {words} (got 'v')"


def test_bounds_are_inclusive_or_exclusive_as_declared():
    def spec(**rules):
        return Spec(name="k", kind=float, default=None, help="", label="", **rules)

    assert spec(at_least=1).check(1) == 1.0
    assert spec(at_most=1).check(1) == 1.0
    for rules in (dict(above=1), dict(below=1)):
        with pytest.raises(SettingError):
            spec(**rules).check(1)
    assert spec(above=1).check(1.001) == 1.001 and spec(below=1).check(0.999) == 0.999
    with pytest.raises(SettingError):
        spec(at_least=1).check(0.999)
    with pytest.raises(SettingError):
        spec(at_most=1).check(1.001)


# -- text in, text out ------------------------------------------------------------------------
def _spec(kind, **rules):
    return Spec(name="k", kind=kind, default=None, help="", label="", **rules)


def test_none_is_read_for_an_optional_field_only():
    for text in ("", "none", "None", " NONE "):
        assert _spec(int, optional=True).parse(text) is None
    with pytest.raises(SettingError, match=r"^k must be a whole number \(got 'none'\)$"):
        _spec(int).parse("none")
    assert _spec(int).parse(" 010 ") == 10  # decimal, leading zeros and spaces allowed


@pytest.mark.parametrize(
    "kind, text",
    [(bool, "perhaps"), (int, "0x10"), (float, "1,5"), (tuple, "[1"), (dict, "a")],
)
def test_unreadable_text_is_quoted_as_typed(kind, text):
    with pytest.raises(SettingError) as info:
        _spec(kind).parse(text)
    assert str(info.value).endswith(f"(got {text!r})")


def test_values_as_a_dialog_shows_them():
    assert _spec(int, optional=True).text(None) == ""
    assert _spec(bool).text(True) == "true" and _spec(bool).text(False) == "false"
    assert _spec(float).text(0.05) == "0.05" and _spec(float).text(1e-7) == "1e-07"
    assert _spec(tuple).text(("\n", "é")) == '["\\n", "\\u00e9"]'
    assert _spec(dict).text({"é": 1.0, "7": "never"}) == '{"é": 1.0, "7": "never"}'
    assert _spec(str).text("fast") == "fast" and _spec(int).text(3) == "3"


def test_lists_from_json_or_commas():
    assert S.parse_list('["a,b", "c"]') == ["a,b", "c"]
    assert S.parse_list("a, b,,c ,") == ["a", "b", "c"]
    assert S.parse_list("a b") == ["a b"]
    assert S.parse_list("[1") is None


def test_bias_tables_from_json_or_pairs():
    assert S.parse_bias("") == {}
    assert S.parse_bias('{"the": -2}') == {"the": -2}
    assert S.parse_bias('{"the": ') is None
    assert S.parse_bias('"a:b": 2, 50256:never') == {"a:b": 2.0, "50256": "never"}
    assert S.parse_bias('\'x\': 1, "": 3, "ab: 4, XaX: 5') == {
        "x": 1.0,
        "": 3.0,
        '"ab': 4.0,
        "XaX": 5.0,
    }
    for bad in (":5", "abc", "a:b:", "a: lots"):
        assert S.parse_bias(bad) is None, bad


def test_a_bias_table_takes_ids_or_text_to_a_float_or_never():
    spec = Settings.spec("logit_bias")
    out = spec.check({"the": 2, 7: -1.5, "x": "never"})
    assert out == {"the": 2.0, "7": -1.5, "x": "never"} and type(out["the"]) is float
    for bad in ({True: 1.0}, {1.5: 1.0}, {("a",): 1.0}, {"": 1.0}, {"a": True}, {"a": "often"}):
        with pytest.raises(SettingError) as info:
            spec.check(bad)
        assert str(info.value).endswith(f"(got {bad!r})")


def test_a_bad_annotation_names_its_field():
    @dataclass(frozen=True)
    class Odd:
        fine: int = S.setting(1, "Fine", "fine")
        listed: list = S.setting(None, "Listed", "a list")

    with pytest.raises(TypeError, match=r"^setting listed: "):
        S.collect_specs(Odd)
