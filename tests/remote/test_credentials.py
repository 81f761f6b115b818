"""The key goes only where the user sent it (``engine.remote.credentials``).

The attacker is a recording server on 127.0.0.1 (``hostile.Hostile``): a session file
or an imported tree names it, and the test reads what it received. A canary key must
never reach it unasked, nor any file or message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from loomterm.engine.remote import connect
from loomterm.engine.remote.credentials import (
    CredentialError,
    Origin,
    grant,
    needs_consent,
    remember,
    resolve,
    revoke_all,
)
from loomterm.engine.remote.server_config import server_entries
from loomterm.errors import LoomError, ServerError
from tests.remote.hostile import Hostile

CANARY = "sk-canary-5f3e9a1b7c"


@pytest.fixture
def hostile():
    servers: list[Hostile] = []

    def start(**options) -> Hostile:
        server = Hostile(**options).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(autouse=True)
def canary_key(monkeypatch):
    for name in ("LOOMTERM_API_KEY", "OPENAI_API_KEY", "LOOMTERM_KEY_SERVERS", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOOMTERM_API_KEY", CANARY)
    revoke_all()
    yield
    revoke_all()


def config_file(text: str) -> Path:
    from loomterm.engine.remote.server_config import config_path

    path = config_path()
    path.write_text(text, encoding="utf-8")
    return path


def tree_json(url: str) -> dict:
    """A loomterm JSON tree with tokens, whose model is the server at ``url``."""
    return {
        "format": "loomterm-tree",
        "version": 1,
        "name": "shared",
        "model": {"name": "bait", "source": url, "dtype": "server", "server": {"kind": "openai"}},
        "models": {},
        "root": 0,
        "cursor": 1,
        "nodes": [
            {"id": 0, "parent": None, "children": [1], "tokens": [], "pieces": []},
            {"id": 1, "parent": 0, "children": [], "tokens": [7, 8], "pieces": ["Hi", "!"]},
        ],
    }


# -- who named the server ------------------------------------------------------------------


def test_a_url_the_user_gave_gets_the_key(hostile):
    server = hostile()
    with pytest.raises(ServerError):
        connect(server.url)  # it serves nothing: connecting fails after the first probe
    assert server.authorizations()[0] == f"Bearer {CANARY}"


def test_a_url_from_a_file_gets_no_key(hostile):
    server = hostile()
    with pytest.raises(ServerError) as refused:
        connect(server.url, named_by="file")
    assert server.seen, "it was contacted"
    assert server.authorizations() == [None] * len(server.seen)
    assert CANARY not in server.everything()
    assert CANARY not in str(refused.value)


def test_importing_contacts_nothing_and_opening_sends_no_key(hostile, tmp_path):
    from loomterm.export import read_import
    from loomterm.sessions.session import Session, import_session, session_path

    server = hostile()
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps(tree_json(server.url)), encoding="utf-8")
    target = session_path("shared")
    data = import_session(read_import(shared), target)
    assert server.seen == []  # importing contacts nothing
    assert data.model["source"] == server.url and target.exists()

    with pytest.raises(LoomError) as failed:  # the bait server serves no model
        Session.open(target)
    assert server.seen, "opening connects"
    assert server.authorizations() == [None] * len(server.seen)
    assert CANARY not in str(failed.value)

    seen = len(server.seen)
    with pytest.raises(LoomError):  # the user names it on purpose: now the key goes
        Session.open(target, model=server.url)
    assert server.authorizations()[seen] == f"Bearer {CANARY}"
    assert CANARY.encode() not in target.read_bytes()


def test_headers_and_body_fields_a_file_carries_are_not_sent(hostile, tmp_path):
    from loomterm.export import read_import
    from loomterm.sessions.session import Session, import_session, session_path

    server = hostile()
    tree = tree_json(server.url)
    tree["model"]["server"] |= {"headers": {"X-Smuggled": "1"}, "body": {"smuggled": 1}}
    tree["model"] |= {"headers": {"X-Smuggled": "1"}, "body": {"smuggled": 1}}
    tree["settings"] = {"headers": {"X-Smuggled": "1"}}
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps(tree), encoding="utf-8")
    import_session(read_import(shared), session_path("smuggler"))
    with pytest.raises(LoomError):
        Session.open(session_path("smuggler"))
    assert server.seen and "smuggled" not in server.everything().lower()


def test_a_model_table_entry_gets_no_key(hostile):
    from loomterm.engine.loom.registry import reopen_plan

    server = hostile()
    plan = reopen_plan({"kind": "openai", "source": server.url, "fingerprint": {}})
    with pytest.raises(ServerError):
        connect(plan.source, **plan.options)
    assert server.seen and server.authorizations() == [None] * len(server.seen)


def test_the_users_answer_and_the_config_allow_a_file_named_server(hostile):
    server = hostile()
    assert needs_consent(server.url) == "LOOMTERM_API_KEY"
    grant(server.url)  # the editor's "send it" for this run
    assert needs_consent(server.url) is None
    with pytest.raises(ServerError):
        connect(server.url, named_by="file")
    assert server.authorizations()[0] == f"Bearer {CANARY}"

    revoke_all()
    other = hostile()
    path = remember(other.url, True)  # "always, for this server"
    assert f'[servers."{other.url}"]' in path.read_text() and CANARY not in path.read_text()
    assert resolve(other.url, "file").key == CANARY
    assert resolve(server.url, "file").key is None  # another origin: another port
    remember(other.url, False)  # "never": not even when the user names it
    assert resolve(other.url, "user").key is None


def test_the_environment_names_servers_for_its_key(hostile, monkeypatch):
    server = hostile()
    monkeypatch.setenv("LOOMTERM_KEY_SERVERS", f"https://elsewhere.example {server.url}/v1")
    assert resolve(server.url, "file").key == CANARY
    assert resolve("https://attacker.example", "file").key is None


def test_per_host_keys_in_the_config_are_bound_to_their_origin(hostile, monkeypatch):
    server = hostile()
    monkeypatch.setenv("EXAMPLE_KEY", "sk-example-host-only")
    config_file(f'[servers."{server.url}/"]\nkey_env = "EXAMPLE_KEY"\n')
    assert resolve(server.url, "file").key == "sk-example-host-only"  # bound by the user
    assert resolve("http://127.0.0.1:1", "user").key == CANARY  # the environment's own
    port = Origin.of(server.url).port
    assert resolve(f"http://localhost:{port}", "file").key is None  # another host name
    monkeypatch.delenv("EXAMPLE_KEY")
    with pytest.raises(CredentialError, match="EXAMPLE_KEY, which is not set"):
        resolve(server.url, "file")


def test_origins_are_compared_exactly():
    assert Origin.of("HTTPS://Api.Example.COM:443/v1/") == Origin.of("https://api.example.com")
    assert Origin.of("http://api.example.com") != Origin.of("https://api.example.com")
    assert Origin.of("https://api.example.com.") == Origin.of("https://api.example.com")
    assert Origin.of("https://api.example.com:8443") != Origin.of("https://api.example.com")
    assert Origin.of("https://api.example.com@evil.example").host == "evil.example"
    assert Origin.of("http://[::1]:8080").loopback and Origin.of("http://127.9.9.9").loopback
    assert not Origin.of("http://127.0.0.1.evil.example").loopback
    assert not Origin.of("http://localhost.evil.example").loopback


def test_a_bad_address_is_one_line_without_its_password():
    for url in ("http://user:hunter2@127.0.0.1:99999", "http://u:hunter2\r\n@[::1"):
        with pytest.raises(ServerError) as bad:
            connect(url)
        assert "hunter2" not in str(bad.value) and "\n" not in str(bad.value)
        assert str(bad.value).startswith("http://")


def test_an_authorization_header_in_the_config_wins_over_the_key(hostile):
    server = hostile()
    config_file(f'[servers."{server.url}"]\nheaders = {{ "authorization" = "Basic dTpw" }}\n')
    with pytest.raises(ServerError):
        connect(server.url)
    assert server.authorizations() == ["Basic dTpw"] * len(server.seen)


# -- plain http -------------------------------------------------------------------------------


class _Sockets:
    """Every socket connection and name lookup this process tries (an audit hook: real
    calls, seen, not replaced)."""

    def __init__(self) -> None:
        self.tries: list[tuple] = []
        self.on = False
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if self.on and event in ("socket.connect", "socket.getaddrinfo"):
            self.tries.append((event, args))


SOCKETS = _Sockets()


def test_no_key_over_plain_http_to_another_host_and_no_connection_tried():
    SOCKETS.tries.clear()
    SOCKETS.on = True
    try:
        with pytest.raises(CredentialError) as refused:
            connect("http://example.invalid:8080")
    finally:
        SOCKETS.on = False
    assert SOCKETS.tries == []
    message = str(refused.value)
    assert message == (
        "not sending the key in LOOMTERM_API_KEY to http://example.invalid:8080 over plain "
        "http (anyone on the way could read it): use https://, or a server on this machine"
    )
    # A file's URL gets no key, so nothing secret would go: that one may be tried.
    assert resolve("http://example.invalid:8080", "file").key is None


def test_a_secret_header_from_the_config_follows_the_same_rule():
    config_file('[servers."http://example.invalid"]\nheaders = { "X-Api-Key" = "sk-h-1234" }\n')
    with pytest.raises(CredentialError, match="header X-Api-Key to http://example.invalid"):
        resolve("http://example.invalid", "file")
    assert "sk-h-1234" not in str(server_entries())  # entries never show a value


def test_a_secret_body_field_from_the_config_follows_the_same_rule():
    config_file('[servers."http://example.invalid"]\nbody = { "api_key" = "sk-b-1234" }\n')
    with pytest.raises(CredentialError, match="body field api_key to http://example.invalid"):
        resolve("http://example.invalid", "file")


def test_the_model_view_lines_mask_secret_headers_and_body_fields():
    from loomterm.engine.remote.credentials import Credentials

    creds = Credentials(
        headers={"X-Api-Key": "sk-view-header-987654", "X-Org": "org-7"},
        body={"api_key": "sk-view-body-123456", "api_token": 42, "custom": "plain", "prompt": "x"},
    )
    lines = creds.describe()
    assert lines == [
        "API key: none",
        "header X-Api-Key: \u2022\u2022\u2022\u2022\u2022\u202254",
        "header X-Org: org-7",
        "body api_key: \u2022\u2022\u2022\u2022\u2022\u202256",
        "body api_token: \u2022\u2022\u2022\u2022\u2022\u2022",
        'body custom: "plain"',
        "body prompt: ignored (loomterm sets it)",
    ]


def test_a_server_echoing_its_secrets_back_has_them_masked_in_the_message(hostile):
    server = hostile(status=400, echo=True)
    config_file(
        f'[servers."{server.url}"]\n'
        'headers = { "X-Api-Key" = "sk-echo-header-31337", "X-Org" = "org-echo" }\n'
    )
    with pytest.raises(ServerError) as refused:
        connect(server.url)  # the user's URL: the key goes too
    assert server.seen and server.authorizations()[0] == f"Bearer {CANARY}"
    assert "sk-echo-header-31337" in server.everything()  # it was sent, and echoed
    message = str(refused.value)
    assert "\n" not in message and "org-echo" in message  # the echo is in the message...
    assert "sk-echo-header-31337" not in message and CANARY not in message  # ...masked
    assert "\u2022" * 6 in message


def test_config_headers_and_body_fields_do_not_follow_a_redirect(hostile):
    elsewhere = hostile()
    server = hostile(redirect_to=elsewhere.url)
    config_file(
        f'[servers."{server.url}"]\n'
        'headers = { "X-Api-Key" = "sk-redirect-header-1", "X-Org" = "org-r" }\n'
        'body = { "loomterm_test_field" = "woven" }\n'
    )
    with pytest.raises(ServerError, match="does not follow redirects"):
        connect(server.url, named_by="file")
    assert server.seen and server.seen[0].headers.get("X-Api-Key") == "sk-redirect-header-1"
    assert elsewhere.seen == []


# -- redirects --------------------------------------------------------------------------------


def test_a_redirect_to_another_origin_is_not_followed(hostile):
    elsewhere = hostile()
    server = hostile(redirect_to=elsewhere.url)
    with pytest.raises(ServerError) as redirected:
        connect(server.url)
    assert server.authorizations()[0] == f"Bearer {CANARY}"  # the user named this one
    assert elsewhere.seen == []  # nothing, so no key, went on to the other origin
    message = str(redirected.value)
    assert "\n" not in message and CANARY not in message
    assert message == (
        f"the server at {server.url} redirected /props to {elsewhere.url}/props (307); "
        "loomterm does not follow redirects: give the address it names"
    )


# -- malformed keys ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, why",
    [
        (f"{CANARY}\r\nX-Injected: 1", "holds a line break: a key is one line"),
        (f"{CANARY}\u00e9", "holds characters that are not ASCII"),
        (f"{CANARY}\x1b[2J", "holds a control character"),
    ],
)
def test_a_malformed_key_is_one_line_without_the_key(hostile, monkeypatch, key, why):
    server = hostile()
    monkeypatch.setenv("LOOMTERM_API_KEY", key)
    with pytest.raises(CredentialError) as refused:
        connect(server.url)
    assert str(refused.value) == f"LOOMTERM_API_KEY {why}"
    assert server.seen == []  # refused before sending anything


def test_the_command_line_says_a_malformed_key_in_one_line(hostile):
    server = hostile()
    for key in (f"{CANARY}\r\nX-Injected: 1", f"{CANARY}\u00e9"):
        done = subprocess.run(
            [sys.executable, "-m", "loomterm.cli", "--model", server.url, "--prompt", "Hi"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LOOMTERM_API_KEY": key},
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode != 0
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
        assert CANARY not in done.stderr + done.stdout
        assert done.stderr.startswith("loomterm: LOOMTERM_API_KEY holds")
    assert server.seen == []


def test_the_command_line_refuses_plain_http_before_loading_anything():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loomterm.cli",
            "--model",
            "http://example.invalid",
            "--prompt",
            "Hi",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LOOMTERM_API_KEY": CANARY},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("loomterm: not sending the key in LOOMTERM_API_KEY to ")
    assert done.stderr.count("\n") == 1 and CANARY not in done.stderr


def test_a_key_never_shows_in_a_repr():
    creds = resolve("http://127.0.0.1:9", "user")
    assert creds.key == CANARY and CANARY not in repr(creds)


def test_threads_do_not_mix_answers(hostile):
    """Granting one origin from another thread changes nothing for the others."""
    a, b = hostile(), hostile()
    done = threading.Event()

    def give() -> None:
        grant(a.url)
        done.set()

    threading.Thread(target=give).start()
    assert done.wait(5)
    assert resolve(a.url, "file").key == CANARY
    assert resolve(b.url, "file").key is None


def test_a_withheld_key_is_said_in_one_line_with_how_to_allow_it(hostile, tmp_path):
    from loomterm.engine.remote.server_config import config_path

    server = hostile(status=401)
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps(tree_json(server.url)), encoding="utf-8")
    run = [sys.executable, "-m", "loomterm.cli"]
    env = {**os.environ, "LOOMTERM_API_KEY": CANARY}
    imported = subprocess.run(
        [*run, "import", str(shared)], capture_output=True, text=True, env=env, timeout=120
    )
    assert imported.returncode == 0, imported.stderr
    assert server.seen == []
    done = subprocess.run(
        [*run, "generate", "-s", "shared", "--max-new-tokens", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1
    *_progress, line, end = done.stderr.split("\n")
    assert "Traceback" not in done.stderr and end == ""
    assert line == (
        f"loomterm: the server at {server.url} asks for an API key (401: Invalid API Key); "
        f"LOOMTERM_API_KEY was not sent to {server.url}, which a file named: to send it, "
        f'give --model {server.url} or add [servers."{server.url}"] send_key = true to '
        f"{config_path()}; session 'shared' can still be read with --read-only"
    )
    assert server.seen and server.authorizations() == [None] * len(server.seen)


# -- per-server headers and body fields -----------------------------------------------------


def test_config_headers_and_body_fields_go_to_their_server_only(llama_server, hostile):
    from loomterm.engine import Loom

    mine = hostile(upstream=llama_server.url)
    other = hostile(upstream=llama_server.url)
    config_file(
        f'[servers."{mine.url}"]\n'
        'headers = { "X-Org" = "org-7", "X-Api-Key" = "sk-header-canary-1" }\n'
        'body = { "loomterm_test_field" = "woven", "prompt" = "hijacked", "n_probs" = 0 }\n'
    )
    loom = Loom(connect(mine.url, named_by="file"))
    [kid] = loom.generate(loom.append(loom.root, "Once upon a time"), 3, temperature=0)
    assert len(kid.tokens) == 3 and all(top for top in kid.top)  # n_probs was not changed
    assert mine.seen and all(s.headers.get("X-Org") == "org-7" for s in mine.seen)
    assert all(s.headers.get("X-Api-Key") == "sk-header-canary-1" for s in mine.seen)
    completions = [json.loads(s.body) for s in mine.seen if s.path == "/completion"]
    assert completions and all(c["loomterm_test_field"] == "woven" for c in completions)
    assert all(isinstance(c["prompt"], list) for c in completions)  # protected fields stay
    others = [json.loads(s.body) for s in mine.seen if s.path == "/tokenize"]
    assert all("loomterm_test_field" not in body for body in others)
    loom.runner.close()

    loom = Loom(connect(other.url))  # another origin: none of them
    loom.generate(loom.append(loom.root, "Once"), 2, temperature=0)
    assert other.seen and "sk-header-canary-1" not in other.everything()
    assert "org-7" not in other.everything() and "loomterm_test_field" not in other.everything()
    loom.runner.close()


def test_config_headers_and_body_fields_stay_out_of_sessions_and_exports(
    llama_server, hostile, tmp_path, isolated_dirs
):
    from loomterm.engine import Loom
    from loomterm.export import render
    from loomterm.sessions.session import Session, close_session, load_session

    mine = hostile(upstream=llama_server.url)
    config_file(
        f'[servers."{mine.url}"]\n'
        'headers = { "X-Api-Key" = "sk-header-canary-2", "X-Org" = "org-canary-2" }\n'
        'body = { "loomterm_canary_field" = "woven-canary-2" }\n'
    )
    loom = Loom(connect(mine.url))
    loom.generate(loom.append(loom.root, "Once upon a time"), 3, temperature=0)
    path = tmp_path / "headers.loom"
    Session.create(loom, path)
    close_session(loom)
    assert any("woven-canary-2" in s.body.decode() for s in mine.seen)  # they were sent
    data = load_session(path)
    for fmt in ("md", "json", "txt", "html"):
        (tmp_path / f"export.{fmt}").write_text(render(data, fmt), encoding="utf-8")
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".toml"]
    written += [p for p in isolated_dirs.rglob("*") if p.is_file() and p.name != "config.toml"]
    assert len(written) >= 5
    for canary in (
        b"sk-header-canary-2",
        b"org-canary-2",
        b"loomterm_canary_field",
        b"woven-canary-2",
    ):
        assert [p for p in written if canary in p.read_bytes()] == []


def test_a_keyed_server_end_to_end_and_no_file_holds_the_key(own_server, tmp_path, isolated_dirs):
    """A real llama-server that wants the canary key: the user's URL gets it; the saved
    session reopened from its file does not, until the config allows it; no file written
    along the way (session, export, config) holds the key."""
    from loomterm.engine import Loom
    from loomterm.errors import SessionError
    from loomterm.export import render
    from loomterm.sessions.session import Session, close_session, load_session

    server = own_server(extra=("--api-key", CANARY))
    loom = Loom.load(server.url)
    [kid] = loom.generate(loom.append(loom.root, "Once upon a time"), 3, temperature=0)
    path = tmp_path / "keyed.loom"
    Session.create(loom, path)
    close_session(loom)

    with pytest.raises(SessionError) as refused:
        Session.open(path)
    message = str(refused.value)
    assert "asks for an API key (401" in message and "send_key = true" in message
    assert CANARY not in message

    remember(server.url, True)
    reopened = Session.open(path).loom
    reopened.generate(reopened.tree.nodes[kid.id], 2, temperature=0)
    close_session(reopened)

    data = load_session(path)
    for fmt in ("md", "json", "txt", "html"):
        (tmp_path / f"export.{fmt}").write_text(render(data, fmt), encoding="utf-8")
    written = [p for root in (tmp_path, isolated_dirs) for p in root.rglob("*") if p.is_file()]
    assert len(written) >= 6
    holding = [p for p in written if CANARY.encode() in p.read_bytes()]
    assert holding == []


def test_remembering_keeps_the_rest_of_the_config():
    path = config_file(
        "# my servers\n"
        '[servers."https://api.example.com:443/v1"]  # the provider\n'
        'key_env = "EXAMPLE_KEY"\n'
    )
    remember("https://API.example.com", False)
    text = path.read_text()
    assert "# my servers" in text and "# the provider" in text and 'key_env = "EXAMPLE_KEY"' in text
    assert text.count("[servers.") == 1 and "send_key = false" in text
    [entry] = server_entries().values()
    assert entry.send_key is False and entry.key_env == "EXAMPLE_KEY"
    config_file("servers = 3\n")
    with pytest.raises(CredentialError, match="servers is not a table"):
        remember("https://api.example.com", True)


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX's")
def test_a_config_others_can_write_is_refused():
    path = config_file('[servers."https://api.example.com"]\nsend_key = true\n')
    path.chmod(0o666)
    with pytest.raises(CredentialError, match=r"can be changed by another user.*chmod o-w"):
        resolve("https://api.example.com", "file")
    path.chmod(0o644)
    assert resolve("https://api.example.com", "file").key == CANARY
