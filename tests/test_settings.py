"""The settings object: every field's checks and messages, parsing, stored sessions of
older versions, and each default written once."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from loomterm.config.settings import DEFAULTS, EngineOptions, SettingError, Settings, parse
from loomterm.errors import InputError, LoomError

# name -> (good values, (bad value, the message) pairs)
CASES = {
    "temperature": (
        [0, 0.0, 0.7, 2, 1e3],
        [
            (-0.1, "temperature must be a number >= 0 (got -0.1)"),
            (True, "temperature must be a number >= 0 (got True)"),
            ("0.7", "temperature must be a number >= 0 (got '0.7')"),
            (float("nan"), "temperature must be a number >= 0 (got nan)"),
            (None, "temperature must be a number >= 0 (got None)"),
        ],
    ),
    "top_p": (
        [1, 0.9, 1e-6],
        [
            (0, "top_p must be a number in (0, 1] (got 0)"),
            (1.5, "top_p must be a number in (0, 1] (got 1.5)"),
            (False, "top_p must be a number in (0, 1] (got False)"),
        ],
    ),
    "top_k": (
        [0, 1, 40, 5.0],
        [
            (-1, "top_k must be a whole number >= 0 (got -1)"),
            (2.5, "top_k must be a whole number >= 0 (got 2.5)"),
            (True, "top_k must be a whole number >= 0 (got True)"),
        ],
    ),
    "min_p": (
        [0, 0.05, 0.999],
        [
            (1, "min_p must be a number in [0, 1) (got 1)"),
            (-0.5, "min_p must be a number in [0, 1) (got -0.5)"),
        ],
    ),
    "repetition_penalty": (
        [1, 1.1, 0.5],
        [
            (0, "repetition_penalty must be a number > 0 (got 0)"),
            (-1.0, "repetition_penalty must be a number > 0 (got -1.0)"),
        ],
    ),
    "presence_penalty": (
        [0, -2, 2, 0.5],
        [(2.5, "presence_penalty must be a number in [-2, 2] (got 2.5)")],
    ),
    "frequency_penalty": (
        [0, -1.5, 2],
        [(-3, "frequency_penalty must be a number in [-2, 2] (got -3)")],
    ),
    "penalty_last_n": (
        [-1, 0, 64],
        [(-2, "penalty_last_n must be a whole number >= -1 (got -2)")],
    ),
    "typical_p": (
        [1, 0.5],
        [(0, "typical_p must be a number in (0, 1] (got 0)")],
    ),
    "xtc_probability": (
        [0, 0.5, 1],
        [(1.1, "xtc_probability must be a number in [0, 1] (got 1.1)")],
    ),
    "xtc_threshold": (
        [0.1, 0, 1],
        [(-0.1, "xtc_threshold must be a number in [0, 1] (got -0.1)")],
    ),
    "dry_multiplier": (
        [0, 0.8],
        [(-1, "dry_multiplier must be a number >= 0 (got -1)")],
    ),
    "dry_base": (
        [1.75, 1],
        [(0.5, "dry_base must be a number >= 1 (got 0.5)")],
    ),
    "dry_allowed_length": (
        [2, 0],
        [(1.5, "dry_allowed_length must be a whole number >= 0 (got 1.5)")],
    ),
    "dry_penalty_last_n": (
        [-1, 0, 512],
        [(-5, "dry_penalty_last_n must be a whole number >= -1 (got -5)")],
    ),
    "dry_sequence_breakers": (
        [("\n",), ("\n", ":")],
        [("\n", "dry_sequence_breakers must be a list of strings (got '\\n')")],
    ),
    "mirostat": (
        [0, 2],
        [(1, "mirostat must be one of 0, 2 (got 1)")],
    ),
    "mirostat_tau": ([5.0, 3], [(-1, "mirostat_tau must be a number >= 0 (got -1)")]),
    "mirostat_eta": ([0.1, 0], [(-0.1, "mirostat_eta must be a number >= 0 (got -0.1)")]),
    "dynatemp_range": ([0, 0.5], [(-1, "dynatemp_range must be a number >= 0 (got -1)")]),
    "dynatemp_exponent": ([1.0, 2], [(-1, "dynatemp_exponent must be a number >= 0 (got -1)")]),
    "top_n_sigma": (
        [-1, 0, 1.5],
        [
            (-2, "top_n_sigma must be a number >= -1 (got -2)"),
            ("x", "top_n_sigma must be a number >= -1 (got 'x')"),
        ],
    ),
    "logit_bias": (
        [{}, {"12": -1.0}, {"the": "never"}],
        [("x", "logit_bias must be a table of token or text to a bias or never (got 'x')")],
    ),
    "preset": (["", "creative"], [(3, "preset must be text (got 3)")]),
    "banned_strings": (
        [(), ("as an AI",)],
        [("as an AI", "banned_strings must be a list of strings (got 'as an AI')")],
    ),
    "banned_strings_ignore_case": (
        [True, False],
        [("no", "banned_strings_ignore_case must be true or false (got 'no')")],
    ),
    "token_healing": (
        ["auto", "on", "off"],
        [
            (True, "token_healing must be one of auto, on, off (got True)"),
            ("no", "token_healing must be one of auto, on, off (got 'no')"),
        ],
    ),
    "max_new_tokens": (
        [1, 128, 100_000],
        [
            (0, "max_new_tokens must be a whole number from 1 to 100000 (got 0)"),
            (100_001, "max_new_tokens must be a whole number from 1 to 100000 (got 100001)"),
            ("64", "max_new_tokens must be a whole number from 1 to 100000 (got '64')"),
        ],
    ),
    "n": (
        [1, 4, 64],
        [
            (0, "n must be a whole number from 1 to 64 (got 0)"),
            (65, "n must be a whole number from 1 to 64 (got 65)"),
            (1.5, "n must be a whole number from 1 to 64 (got 1.5)"),
        ],
    ),
    "splice_mode": (
        ["fast", "exact"],
        [
            ("fastest", "splice_mode must be one of fast, exact (got 'fastest')"),
            ("Exact", "splice_mode must be one of fast, exact (got 'Exact')"),
            (None, "splice_mode must be one of fast, exact (got None)"),
        ],
    ),
    "kv_snapshot": (
        [True, False],
        [
            (1, "kv_snapshot must be true or false (got 1)"),
            ("yes", "kv_snapshot must be true or false (got 'yes')"),
        ],
    ),
    "memory": (["", "The weaver\nremembers."], [(None, "memory must be text (got None)")]),
    "authors_note": (["", "[Style: terse]"], [(3, "authors_note must be text (got 3)")]),
    "authors_note_depth": (
        [0, 3, 100_000],
        [(-1, "authors_note_depth must be a whole number from 0 to 100000 (got -1)")],
    ),
    "world_info": (
        [
            {"scan_depth": 64, "entries": []},
            {"scan_depth": 8, "entries": [{"keys": ["Ada", "tower"], "text": "A mage."}]},
        ],
        [
            ("x", "world_info must be a table of scan_depth and entries (got 'x')"),
            (
                {"entries": [{"keys": [], "text": "t"}]},
                "world_info entry 1 has no keys: give at least one word that triggers it",
            ),
        ],
    ),  # fmt: skip
    "drafting": (
        ["auto", "tree", "lookahead", "off"],
        [
            ("on", "drafting must be one of auto, tree, lookahead, off (got 'on')"),
            (True, "drafting must be one of auto, tree, lookahead, off (got True)"),
            (None, "drafting must be one of auto, tree, lookahead, off (got None)"),
        ],
    ),
    "think_ahead": (
        ["auto", "on", "off"],
        [
            (True, "think_ahead must be one of auto, on, off (got True)"),
            ("yes", "think_ahead must be one of auto, on, off (got 'yes')"),
        ],
    ),
    "think_ahead_pause": (
        [0.2, 1.5, 60],
        [
            (0.1, "think_ahead_pause must be a number in [0.2, 60] (got 0.1)"),
            ("soon", "think_ahead_pause must be a number in [0.2, 60] (got 'soon')"),
        ],
    ),
}


def test_every_field_has_cases():
    assert set(CASES) == set(Settings.SPECS)


@pytest.mark.parametrize("name", list(CASES))
def test_good_values_are_kept_in_the_fields_type(name):
    spec = Settings.spec(name)
    for value in CASES[name][0]:
        changed = DEFAULTS.replace(**{name: value})
        assert getattr(changed, name) == value
        assert type(getattr(changed, name)) is spec.kind  # an int for a float is a float
        assert Settings(**{name: value}) == changed


@pytest.mark.parametrize("name", list(CASES))
def test_bad_values_raise_one_line_naming_the_setting(name):
    for value, message in CASES[name][1]:
        with pytest.raises(SettingError) as caught:
            DEFAULTS.replace(**{name: value})
        assert str(caught.value) == message
        assert "\n" not in message
        assert caught.value.setting == name
        assert message == f"{name} {caught.value.problem}"
        with pytest.raises(SettingError):
            Settings(**{name: value})  # the constructor checks as much


def test_setting_error_is_an_input_error():
    assert issubclass(SettingError, InputError) and issubclass(SettingError, LoomError)


def test_unknown_keys_suggest_the_closest_name():
    with pytest.raises(SettingError) as caught:
        DEFAULTS.replace(temprature=0.5)
    assert str(caught.value) == "unknown setting 'temprature' (did you mean temperature?)"
    with pytest.raises(SettingError) as caught:
        DEFAULTS.replace(zzz=1)
    assert str(caught.value).startswith("unknown setting 'zzz' (known: temperature, top_p,")
    with pytest.raises(SettingError, match="did you mean splice_mode"):
        Settings.spec("splice_mod")
    with pytest.raises(SettingError, match="did you mean top_k"):
        parse("topk", "4")


def test_replace_changes_only_what_is_asked_and_checks_before_changing():
    s = DEFAULTS.replace(temperature=0.3, n=2)
    assert (s.temperature, s.n, s.top_p) == (0.3, 2, 1.0)
    assert DEFAULTS.temperature == 1.0  # frozen: a new object
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.temperature = 2.0  # type: ignore[misc]  # the point: a frozen field refuses it
    with pytest.raises(SettingError):
        s.replace(temperature=0.5, splice_mode="slow")
    assert s.temperature == 0.3


@pytest.mark.parametrize(
    "name, text, value",
    [
        ("temperature", " 0.7 ", 0.7),
        ("temperature", "0", 0.0),
        ("top_p", "1", 1.0),
        ("top_k", "40", 40),
        ("min_p", "5e-2", 0.05),
        ("max_new_tokens", "64", 64),
        ("n", "8", 8),
        ("splice_mode", "Exact", "exact"),
        ("drafting", "lookahead", "lookahead"),
        ("kv_snapshot", "yes", True),
        ("kv_snapshot", "off", False),
        ("kv_snapshot", "True", True),
    ],
)
def test_parse_reads_text(name, text, value):
    parsed = parse(name, text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("temperature", "hot", "temperature must be a number >= 0 (got 'hot')"),
        ("temperature", "", "temperature must be a number >= 0 (got '')"),
        ("temperature", "-1", "temperature must be a number >= 0 (got -1.0)"),
        ("temperature", "inf", "temperature must be a number >= 0 (got inf)"),
        ("top_p", "2", "top_p must be a number in (0, 1] (got 2.0)"),
        ("top_k", "4.5", "top_k must be a whole number >= 0 (got '4.5')"),
        ("n", "0", "n must be a whole number from 1 to 64 (got 0)"),
        ("splice_mode", "fastest", "splice_mode must be one of fast, exact (got 'fastest')"),
        ("kv_snapshot", "maybe", "kv_snapshot must be true or false (got 'maybe')"),
    ],
)
def test_parse_names_what_it_cannot_read(name, text, message):
    with pytest.raises(SettingError) as caught:
        parse(name, text)
    assert str(caught.value) == message


def test_every_value_reads_back_from_its_text():
    for name, spec in Settings.SPECS.items():
        for value in CASES[name][0]:
            assert spec.parse(spec.text(spec.check(value))) == spec.check(value)


# -- stored sessions ---------------------------------------------------------------------


def test_from_stored_reads_what_this_version_writes():
    s = DEFAULTS.replace(temperature=0.25, splice_mode="exact", drafting="tree", kv_snapshot=True)
    again, warnings = Settings.from_stored(s.as_dict())
    assert again == s and warnings == []
    assert Settings.from_stored({}) == (DEFAULTS, [])
    assert Settings.from_stored(None) == (DEFAULTS, [])
    assert Settings.from_stored(s) == (s, [])


@pytest.mark.parametrize(
    "stored, drafting",
    [(True, "auto"), ("on", "auto"), (False, "off"), (None, "off"), ("lookahead", "lookahead")],
)
def test_from_stored_maps_legacy_drafting_values(stored, drafting):
    settings, warnings = Settings.from_stored({"drafting": stored, "temperature": 0.5})
    assert settings.drafting == drafting and settings.temperature == 0.5
    assert warnings == []  # the same meaning, spelt as older versions did


@pytest.mark.parametrize("stored, healing", [(True, "on"), (False, "off"), ("auto", "auto")])
def test_from_stored_maps_legacy_healing_values(stored, healing):
    """Token healing was on or off before ``auto``: a session keeps its meaning."""
    settings, warnings = Settings.from_stored({"token_healing": stored})
    assert settings.token_healing == healing and warnings == []


def test_from_stored_drops_unknown_keys_and_bad_values_with_a_warning_each():
    stored = {
        "temperature": -3,
        "splice_mode": "fastest",
        "top_k": 40,
        "temprature": 0.2,
        "xyzzy": [1, 2],
        "drafting": "maybe",
    }
    settings, warnings = Settings.from_stored(stored)
    assert settings == DEFAULTS.replace(top_k=40)
    assert warnings == [
        "stored setting temperature must be a number >= 0 (got -3): using the default 1.0",
        "stored setting splice_mode must be one of fast, exact (got 'fastest'): "
        "using the default 'fast'",
        "dropped the unknown stored setting 'temprature' (did you mean temperature?)",
        "dropped the unknown stored setting 'xyzzy' (known: " + ", ".join(Settings.SPECS) + ")",
        "stored setting drafting must be one of auto, tree, lookahead, off (got 'maybe'): "
        "using the default 'auto'",
    ]
    assert all("\n" not in line for line in warnings)


def test_from_stored_of_something_not_a_table_uses_the_defaults_and_says_so():
    # Not a table, against the type: the point is a file that holds one, survived.
    settings, warnings = Settings.from_stored(["temperature"])  # type: ignore[arg-type]
    assert settings == DEFAULTS and len(warnings) == 1 and "defaults" in warnings[0]


# -- reading ------------------------------------------------------------------------------


def test_as_dict_and_sampling():
    s = DEFAULTS.replace(temperature=0.5, top_k=7, logit_bias={"the": -2, 7: "never"})
    stored = s.as_dict()
    assert stored["temperature"] == 0.5 and stored["top_k"] == 7
    assert stored["splice_mode"] == "fast" and stored["drafting"] == "auto"
    assert stored["dry_sequence_breakers"] == ["\n", ":", '"', "*"]  # JSON-ready
    assert stored["logit_bias"] == {"the": -2.0, "7": "never"}
    assert json.loads(json.dumps(stored)) == stored
    assert Settings.from_stored(stored) == (s, [])
    knobs = s.sampling()
    assert set(knobs) == {n for n, spec in Settings.SPECS.items() if spec.sampling}
    assert "max_new_tokens" not in knobs and "n" not in knobs and "splice_mode" not in knobs
    assert knobs["temperature"] == 0.5 and knobs["top_k"] == 7


def test_logit_bias_values_and_text():
    spec = Settings.spec("logit_bias")
    assert spec.parse('"the":-2, 50256:never') == {"the": -2.0, "50256": "never"}
    assert spec.parse('{"a b": 1.5}') == {"a b": 1.5}
    assert spec.parse("") == {}
    assert spec.parse(spec.text({"x": -1.0, "9": "never"})) == {"x": -1.0, "9": "never"}
    for bad in ('"the"', "the:lots", "[1]"):
        with pytest.raises(SettingError, match="logit_bias"):
            spec.parse(bad)
    for bad in ({"x": float("inf")}, {"x": True}, {"": 1.0}, ["x"]):
        with pytest.raises(SettingError, match="logit_bias"):
            DEFAULTS.replace(logit_bias=bad)


def test_every_spec_has_a_label_and_a_one_line_description():
    for spec in Settings.SPECS.values():
        assert spec.label and spec.help and "\n" not in spec.help
        assert spec.default == getattr(DEFAULTS, spec.name)


# -- defaults written once ------------------------------------------------------------------


def test_defaults_are_today_s():
    stored = DEFAULTS.as_dict()
    assert {k: stored[k] for k in ("temperature", "top_p", "top_k", "min_p")} == {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
    }
    assert stored["max_new_tokens"] == 128 and stored["n"] == 4
    assert stored["splice_mode"] == "fast" and stored["drafting"] == "auto"
    assert stored["kv_snapshot"] is False
    # Every newer sampler starts off (neutral): old sessions sample as they did.
    from loomterm.engine.sample.chain import SamplingParams

    neutral = SamplingParams().as_dict()
    assert {k: stored[k] for k in neutral} == neutral


def test_sampling_params_are_the_sampling_settings():
    """Each SamplingParams field is a sampler setting with the same default, and the
    other way round: a sampler added to one and not the other fails here."""
    from loomterm.engine.sample.chain import SamplingParams

    params = {f.name for f in dataclasses.fields(SamplingParams)}
    assert params == set(DEFAULTS.sampling())
    # SamplingParams' own defaults are neutral (every stage off); the user's defaults
    # are Settings'. Both are valid for the other.
    assert SamplingParams(**DEFAULTS.sampling()).as_dict() == {
        name: DEFAULTS.as_dict()[name] for name in params
    }
    assert SamplingParams(**DEFAULTS.replace(top_k=3).sampling()).top_k == 3


def test_loom_defaults_are_the_settings_defaults(tiny_llama_dir):
    """A fresh Loom, and its generate, use Settings' defaults."""
    import inspect

    from loomterm.engine import Loom

    signature = inspect.signature(Loom.generate).parameters
    for name, value in DEFAULTS.sampling().items():
        if name in signature and signature[name].default is not inspect.Parameter.empty:
            assert signature[name].default == value, name
    loom = Loom.load(str(tiny_llama_dir), device="cpu")
    assert loom.settings == DEFAULTS


def test_settings_import_no_torch():
    code = "import sys, loomterm.config.settings; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- engine options ----------------------------------------------------------------------------


def test_engine_options_defaults_and_kwargs():
    options = EngineOptions()
    assert options.as_dict() == {
        "model": None,
        "device": "auto",
        "dtype": "auto",
        "quant": "none",
        "n_ctx": None,
        "kv_budget": None,
        "backend": "auto",
        "threads": None,
        "server_kind": None,
        "server_model": None,
    }
    options = options.replace(model="m", device="cpu", n_ctx=64, kv_budget="3M")
    assert options.model_kwargs() == {
        "model": "m",
        "device": "cpu",
        "dtype": "auto",
        "quant": "none",
    }
    assert options.loom_kwargs() == {"n_ctx": 64, "kv_budget": "3M"}
    assert options.server_kwargs() == {}
    server = {"server_kind": None, "server_model": None}
    backend = {"backend": "auto", "threads": None}
    assert options.load_kwargs() == {
        **options.model_kwargs(),
        **options.loom_kwargs(),
        **backend,
        **server,
    }
    with pytest.raises(SettingError, match="backend must be one of"):
        options.replace(backend="vulkan")
    remote = options.replace(model="http://127.0.0.1:9", server_kind="vllm")
    assert remote.server_kwargs() == {"server_kind": "vllm"}
    with pytest.raises(SettingError, match="server_kind must be one of"):
        options.replace(server_kind="ollama")


def test_engine_options_check_their_values():
    with pytest.raises(
        SettingError, match=r"^n_ctx must be a whole number >= 1 or none \(got 0\)$"
    ):
        EngineOptions(n_ctx=0)
    with pytest.raises(
        SettingError, match=r"^unknown engine option 'ctx' \(did you mean n_ctx\?\)$"
    ):
        EngineOptions().replace(ctx=5)
    assert EngineOptions.SPECS["n_ctx"].parse("64") == 64
    assert EngineOptions.SPECS["n_ctx"].parse("") is None


def test_engine_options_from_args_take_defaults_for_what_is_missing():
    import argparse

    args = argparse.Namespace(model="m", n_ctx=32, session="x")
    assert EngineOptions.from_args(args) == EngineOptions(model="m", n_ctx=32)
