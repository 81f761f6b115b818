"""Which secrets go to which server: keys bound to the origins the user named.

Modelled on what ssh and curl do with secrets. A key goes to a server only when the
user, on this machine, named that server for it:

- the command line or the program (``--model URL``, ``connect(url)``, ``Loom.load(url)``):
  the environment's key (``LOOMTERM_API_KEY``, then ``OPENAI_API_KEY``) goes to that
  URL's origin (``named_by="user"``);
- the environment: ``LOOMTERM_KEY_SERVERS`` (server URLs, space-separated) and
  ``OPENAI_BASE_URL`` (where the OpenAI SDK sends ``OPENAI_API_KEY``) name origins the
  environment's key may go to whoever names them;
- the config file (``<config>/config.toml``, ``server_config``), one table per origin::

      [servers."https://api.example.com"]
      key_env = "EXAMPLE_KEY"   # this origin's key is in $EXAMPLE_KEY (only its own)
      send_key = true           # the environment's key may go here (false: never any key)
      headers = { "OpenAI-Organization" = "org-1" }   # on every request to it
      body = { "cache_prompt" = true }                # in every completion request body

A URL read from a session file, an imported tree or a model table entry
(``named_by="file"``) gets no key unless the config or the environment binds one to its
origin, or the user agreed (:func:`grant`, the editor's dialog; :func:`remember` writes
the answer into the config). Nothing secret (a key, a header that looks secret, a user
and password in the URL) ever goes over plain ``http://`` to a host that is not loopback
(127.0.0.0/8, ::1, localhost), whoever named it: ``CredentialError``, raised
before any connection. Keys and header values are checked first (no CR/LF, no control
characters, ASCII only, not empty); the error names the variable, never the value.

Origins are compared exactly: scheme, host (lower case, IDNA-encoded, no trailing dot)
and port (the scheme's default filled in). Redirects are never followed
(``http.ServerClient``), so nothing is forwarded to another origin.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomterm.engine.remote.origins import (
    CredentialError,
    Origin,
    check_secret,
    looks_secret,
    masked,
    same_origin,
    shown,
)
from loomterm.engine.remote.server_config import (
    CONFIG_FILE,
    ServerEntry,
    config_path,
    reason,
    server_entries,
)

KEY_VARIABLES = ("LOOMTERM_API_KEY", "OPENAI_API_KEY")
KEY_SERVERS_VARIABLE = "LOOMTERM_KEY_SERVERS"
NAMED_BY = ("user", "file")
# Request fields a config's ``body`` table cannot change: they shape the request and
# the stream loomterm reads back.
PROTECTED_FIELDS = frozenset(
    {
        "prompt", "stream", "n", "n_cmpl", "n_predict", "max_tokens", "logprobs", "n_probs",
        "return_tokens", "return_tokens_as_token_ids", "model", "echo", "stream_options",
        "post_sampling_probs", "return_progress", "cache_salt",
    }
)  # fmt: skip
MIN_SCRUBBED = 4  # shorter values are not masked in messages (they would mask words)


def remember(url: str, send: bool, path: Path | None = None) -> Path:
    """Write the user's answer for ``url``'s origin into the config (``send_key``),
    keeping the rest of the file as it was (comments too); returns the file's path."""
    import tomlkit

    from loomterm.atomic import write_atomic

    origin = Origin.of(url)
    path = path or config_path()
    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        document = tomlkit.document()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CredentialError(f"cannot update {path}: {reason(exc)}") from None
    servers = document.get("servers")
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        document["servers"] = servers
    if not isinstance(servers, dict):
        raise CredentialError(f"cannot update {path}: its servers is not a table")
    key = next((k for k in servers if same_origin(str(k), str(origin))), str(origin))
    table = servers.get(key)
    if table is None:
        table = tomlkit.table()
        servers[key] = table
    if not isinstance(table, dict):
        raise CredentialError(f'cannot update {path}: [servers."{key}"] is not a table')
    table["send_key"] = send
    write_atomic(path, tomlkit.dumps(document))
    return path


# -- consent for this run ---------------------------------------------------------------------

_granted: set[Origin] = set()
_granted_lock = threading.Lock()


def grant(url: str) -> None:
    """The user agreed to send the environment's key to ``url``'s origin (for this run)."""
    with _granted_lock:
        _granted.add(Origin.of(url))


def revoke_all() -> None:
    """Forget every answer given in this run (the tests start each from none)."""
    with _granted_lock:
        _granted.clear()


def _env_origins(env: Mapping[str, str]) -> set[Origin]:
    """Origins the environment names for its key (LOOMTERM_KEY_SERVERS, OPENAI_BASE_URL)."""
    urls = env.get(KEY_SERVERS_VARIABLE, "").split() + env.get("OPENAI_BASE_URL", "").split()
    origins = set()
    for url in urls:
        try:
            origins.add(Origin.of(url))
        except CredentialError:
            continue  # not a server address: it names nothing
    return origins


# -- what goes to one server ------------------------------------------------------------------


@dataclass(frozen=True)
class Credentials:
    """What the HTTP client sends one origin. ``key``: the bearer token or None;
    ``key_from``: the variable it came from (for messages); ``withheld``: the one line
    saying how to allow a key that was held back (None when none was); ``headers`` and
    ``body``: the config's, for this origin only."""

    origin: Origin | None = None
    key: str | None = field(default=None, repr=False)  # never in a repr or a traceback
    key_from: str | None = None
    withheld: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    body: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def none(cls) -> Credentials:
        """Nothing secret at all (a reachability check)."""
        return cls()

    def secrets(self) -> list[str]:
        """The values sent to this server that must never be shown: the key, and the
        values of headers and body fields whose names say they are secret."""
        values = [self.key] if self.key else []
        values += [v for k, v in self.headers.items() if looks_secret(k)]
        values += [v for k, v in self.body.items() if looks_secret(k) and isinstance(v, str)]
        return [v for v in values if len(v) >= MIN_SCRUBBED]

    def scrub(self, text: str) -> str:
        """``text`` (a server's words, an address it named) with every secret this
        server was sent masked: a hostile server could echo one back into a message."""
        for value in sorted(self.secrets(), key=len, reverse=True):
            text = text.replace(value, "\u2022" * 6)
        return text

    def body_fields(self) -> dict[str, Any]:
        """The config's body fields that may go in a request (not the protected ones)."""
        return {k: v for k, v in self.body.items() if k not in PROTECTED_FIELDS}

    def describe(self) -> list[str]:
        """What goes to this server, one line each, fit to show: where the key comes
        from (never the key), each header (secret-looking values masked), each body
        field (those loomterm keeps for itself marked ignored)."""
        if self.key:
            lines = [f"API key: from {self.key_from}"]
        elif self.withheld:
            lines = ["API key: held back, a file named this server (send_key = true allows it)"]
        else:
            lines = ["API key: none"]
        lines += [f"header {name}: {masked(name, value)}" for name, value in self.headers.items()]
        for name, value in self.body.items():
            if name in PROTECTED_FIELDS:
                shown = "ignored (loomterm sets it)"
            else:
                shown = _json(value)
                if looks_secret(name):
                    shown = masked(name, value if isinstance(value, str) else shown)
            lines.append(f"body {name}: {shown}")
        return lines


def environment_key(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(variable, key) of the environment's key (``KEY_VARIABLES``, first set), checked;
    None when none is set."""
    env = os.environ if env is None else env
    for name in KEY_VARIABLES:
        value = env.get(name)
        if value is not None and value.strip():
            return name, check_secret(value, name)
    return None


def resolve(
    url: str,
    named_by: str = "user",
    env: Mapping[str, str] | None = None,
    entries: Mapping[Origin, ServerEntry] | None = None,
) -> Credentials:
    """What may be sent to ``url`` (see the module docstring). ``named_by``: "user" (the
    command line, the program) or "file" (a session file, an import, a table entry).

    Raises:
        CredentialError: a malformed key or header, an unreadable config, or something
            secret bound for plain http to a host that is not loopback.
    """
    if named_by not in NAMED_BY:
        raise ValueError(f"named_by must be one of {NAMED_BY}")
    env = os.environ if env is None else env
    origin = Origin.of(url)
    entries = server_entries() if entries is None else entries
    entry = entries.get(origin) or ServerEntry(origin)
    key, key_from, withheld = _key_for(origin, named_by, env, entry)
    secrets = []
    if key:
        secrets.append(f"the key in {key_from}")
    secrets += [f"header {h}" for h in entry.headers if looks_secret(h)]
    secrets += [f"body field {b}" for b in entry.body if looks_secret(b)]
    if _userinfo(url) and named_by == "user":
        secrets.append("the user and password in the address")
    if secrets and origin.scheme == "http" and not origin.loopback:
        raise CredentialError(
            f"not sending {secrets[0]} to {origin} over plain http (anyone on the way could "
            f"read it): use https://, or a server on this machine",
            str(origin),
        )
    return Credentials(origin, key, key_from, withheld, dict(entry.headers), dict(entry.body))


def _key_for(
    origin: Origin, named_by: str, env: Mapping[str, str], entry: ServerEntry
) -> tuple[str | None, str | None, str | None]:
    if entry.send_key is False:
        return None, None, None  # the user said never
    if entry.key_env:
        value = env.get(entry.key_env)
        if value is None:
            raise CredentialError(
                f"{CONFIG_FILE} gives {origin}'s key in {entry.key_env}, which is not set",
                str(origin),
            )
        return check_secret(value, entry.key_env), entry.key_env, None
    found = environment_key(env)
    if found is None:
        return None, None, None
    name, key = found
    with _granted_lock:
        granted = origin in _granted
    if named_by == "user" or entry.send_key or granted or origin in _env_origins(env):
        return key, name, None
    return None, None, withheld_hint(origin, name)


def withheld_hint(origin: Origin, variable: str) -> str:
    """How to let ``variable``'s key go to ``origin``, in one line."""
    return (
        f"{variable} was not sent to {origin}, which a file named: to send it, give "
        f'--model {origin} or add [servers."{origin}"] send_key = true to {config_path()}'
    )


def needs_consent(url: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable whose key would be held back from ``url`` (named by a file) until
    the user agrees; None when nothing would be (no key, or it is allowed or refused
    already, or the address is not a server's). Never raises."""
    try:
        creds = resolve(url, "file", env)
    except CredentialError:
        return None  # the connection says why
    if creds.withheld is None:
        return None
    found = environment_key(os.environ if env is None else env)
    return found[0] if found else None


def _userinfo(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        return bool(urlsplit(str(url).strip()).username)
    except ValueError:
        return False


def _json(value: Any) -> str:
    import json

    return shown(json.dumps(value, ensure_ascii=False, default=str))
