"""The config reader and the key check take any input: a result or one line, never a
traceback, and never the secret in the line (hypothesis)."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from loomterm.engine.remote.origins import CredentialError, Origin, check_secret
from loomterm.engine.remote.server_config import server_entries

KEYISH = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=40)


@settings(max_examples=300, deadline=None)
@given(KEYISH, KEYISH)
def test_a_key_is_clean_or_one_line_without_it(before, after):
    value = before + "sk-CANARY" + after
    try:
        key = check_secret(value, "LOOMTERM_API_KEY")
    except CredentialError as exc:
        message = str(exc)
        assert message.startswith("LOOMTERM_API_KEY ") and "\n" not in message
        assert "CANARY" not in message
        return
    assert key and key.isascii() and key.isprintable() and "sk-CANARY" in key


TOML_BITS = st.sampled_from(
    [
        "[servers]\n", '[servers."http://127.0.0.1:8080"]\n', '[servers."x"]\n', "servers = 3\n",
        'key_env = "K"\n', "key_env = 1\n", "send_key = true\n", 'send_key = "yes"\n',
        'headers = { "X-A" = "b" }\n', 'headers = { "bad name" = "v" }\n',
        'headers = { "X" = "a\\nb" }\n', "body = { a = 1 }\n", "body = 2\n", "other = 1\n",
        '[servers."https://h"]\n', "[[servers]]\n", "= broken\n", "\x00", "\ufeff",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TOML_BITS, st.text(string.printable, max_size=12)), max_size=8))
def test_any_config_is_read_or_refused_in_one_line(tmp_path_factory, bits):
    path = tmp_path_factory.mktemp("config") / "config.toml"
    path.write_text("".join(bits), encoding="utf-8")
    try:
        entries = server_entries(path)
    except CredentialError as exc:
        assert "\n" not in str(exc) and str(exc)
        return
    assert all(isinstance(origin, Origin) for origin in entries)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_address_is_an_origin_or_one_line(text):
    for url in (text, "http://" + text, "https://" + text):
        try:
            origin = Origin.of(url)
        except CredentialError as exc:
            assert "\n" not in str(exc)
            continue
        assert Origin.of(str(origin)) == origin  # normalised: its own text gives it back
