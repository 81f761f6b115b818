"""Which secrets go to which server: keys bound to the origins the user named.

Modelled on what ssh and curl do with secrets. A key goes to a server only when the
user, on this machine, named that server for it:

- the command line or the program (``--model URL``, ``connect(url)``, ``Loom.load(url)``):
  the environment's key (``LOOMTERM_API_KEY``, then ``OPENAI_API_KEY``) goes to that
  URL's origin (``named_by="user"``);
- the environment: ``LOOMTERM_KEY_SERVERS`` (server URLs, space-separated) and
  ``OPENAI_BASE_URL`` (where the OpenAI SDK sends ``OPENAI_API_KEY``) name origins the
  environment's key may go to whoever names them;
- the config file (``<config>/config.toml``, :func:`config_path`), one table per origin::

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
(127.0.0.0/8, ::1, localhost), whoever named it: :class:`CredentialError`, raised
before any connection. Keys and header values are checked first (no CR/LF, no control
characters, ASCII only, not empty); the error names the variable, never the value.

Origins are compared exactly: scheme, host (lower case, IDNA-encoded, no trailing dot)
and port (the scheme's default filled in). Redirects are never followed
(``http.ServerClient``), so nothing is forwarded to another origin.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomterm.errors import ServerError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

KEY_VARIABLES = ("LOOMTERM_API_KEY", "OPENAI_API_KEY")
KEY_SERVERS_VARIABLE = "LOOMTERM_KEY_SERVERS"
CONFIG_FILE = "config.toml"
NAMED_BY = ("user", "file")
DEFAULT_PORTS = {"http": 80, "https": 443}
# Request fields a config's ``body`` table cannot change: they shape the request and
# the stream loomterm reads back.
PROTECTED_FIELDS = frozenset(
    {
        "prompt", "stream", "n", "n_cmpl", "n_predict", "max_tokens", "logprobs", "n_probs",
        "return_tokens", "return_tokens_as_token_ids", "model", "echo", "stream_options",
        "post_sampling_probs", "return_progress", "cache_salt",
    }
)  # fmt: skip
# A header or body field whose name says it carries a secret: masked when shown, never
# sent over plain http to a host that is not loopback, masked in a server's message.
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|session|passw|credential", re.I)
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MIN_SCRUBBED = 4  # shorter values are not masked in messages (they would mask words)
_USERINFO = re.compile(r"//[^/?#]*@")  # a URL's user and password, up to the last @


class CredentialError(ServerError):
    """A secret that cannot be sent: malformed, or bound for plain http to a host that
    is not loopback, or a config entry that cannot be read. One line, never the secret."""


# -- origins ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """A server's origin, normalised: scheme, host and port compared exactly."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, url: str) -> Origin:
        """The origin of ``url`` (http or https); :class:`CredentialError` otherwise."""
        import httpx

        text = str(url).strip()
        try:
            parsed = httpx.URL(text)
            scheme = parsed.scheme.lower()
            host = parsed.raw_host.decode("ascii").lower().rstrip(".")
            port = parsed.port or DEFAULT_PORTS.get(scheme, 0)
        except (httpx.InvalidURL, UnicodeError, ValueError, TypeError):
            raise CredentialError(f"{_shown(text)} is not a server address") from None
        if scheme in DEFAULT_PORTS and host and not 0 < port < 65536:
            raise CredentialError(f"{_shown(text)} is not a server address (port {port}?)")
        if scheme not in DEFAULT_PORTS or not host:
            raise CredentialError(
                f"{_shown(text)} is not a server address (use http:// or https://)"
            )
        return cls(scheme, host, port)

    @property
    def loopback(self) -> bool:
        """Whether the host is this machine: 127.0.0.0/8, ::1 or ``localhost``."""
        if self.host == "localhost":
            return True
        try:
            address = ipaddress.ip_address(self.host.strip("[]"))
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)
        return address.is_loopback or bool(mapped and mapped.is_loopback)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host and not self.host.startswith("[") else self.host
        port = "" if DEFAULT_PORTS.get(self.scheme) == self.port else f":{self.port}"
        return f"{self.scheme}://{host}{port}"


def same_origin(a: str, b: str) -> bool:
    """Whether two URLs share an origin (False when either is not a server address)."""
    try:
        return Origin.of(a) == Origin.of(b)
    except CredentialError:
        return False


# -- checking secrets -----------------------------------------------------------------------


def check_secret(value: str, what: str) -> str:
    """``value`` stripped of surrounding spaces, or a one-line :class:`CredentialError`
    naming ``what`` (a variable, a header) but never the value: empty, a line break,
    another control character or a character that is not ASCII cannot go in a header."""
    text = value.strip(" \t")
    if not text:
        raise CredentialError(f"{what} is empty")
    if "\r" in text or "\n" in text:
        raise CredentialError(f"{what} holds a line break: a key is one line")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise CredentialError(f"{what} holds a control character")
    if not text.isascii():
        raise CredentialError(f"{what} holds characters that are not ASCII")
    return text


def looks_secret(header: str) -> bool:
    """Whether a header's (or body field's) name says it carries a secret
    (Authorization, X-Api-Key, api_key...)."""
    return bool(_SECRET_NAME.search(header))


def masked(header: str, value: str) -> str:
    """A header's value fit to show: secret-looking ones as their last 2 characters."""
    if not looks_secret(header):
        return value
    return "\u2022" * 6 + (value[-2:] if len(value) >= 12 else "")


# -- the config file --------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerEntry:
    """One ``[servers."ORIGIN"]`` table of the config (see the module docstring)."""

    origin: Origin
    key_env: str | None = None
    send_key: bool | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    body: Mapping[str, Any] = field(default_factory=dict)


def config_path() -> Path:
    """The config file: ``config.toml`` in the config folder (``LOOMTERM_CONFIG_DIR``)."""
    from loomterm.config.locations import config_dir

    return config_dir() / CONFIG_FILE


def server_entries(path: Path | None = None) -> dict[Origin, ServerEntry]:
    """The config's server tables by origin (none when there is no config file). A file
    that cannot be read, or an entry with a bad field, is a one-line CredentialError."""
    path = path or config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialError(f"cannot read {path}: {_reason(exc)}") from None
    _check_owner(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CredentialError(f"{path} is not valid TOML ({exc})") from None
    servers = data.get("servers", {})
    if not isinstance(servers, dict):
        raise CredentialError(f"{path}: [servers] must be a table of server origins")
    entries = {}
    for name, table in servers.items():
        entry = _entry(path, str(name), table)
        entries[entry.origin] = entry
    return entries


def _check_owner(path: Path) -> None:
    """As ssh does with its config: a file that binds keys to servers must be this
    user's and not writable by everyone, or anyone who can write it could send the key
    anywhere. (Group-writable passes: a umask of 002 with a group of one's own is usual.)"""
    if os.name != "posix":
        return
    try:
        status = path.stat()
    except OSError:
        return
    if status.st_uid != os.geteuid() or status.st_mode & 0o002:
        raise CredentialError(
            f"{path} can be changed by another user, who could send your keys anywhere: "
            f"make it yours and not writable by others (chmod o-w {path})"
        )


def _entry(path: Path, name: str, table: Any) -> ServerEntry:
    where = f'{path.name} [servers."{_shown(name)}"]'
    try:
        origin = Origin.of(name)
    except CredentialError as exc:
        raise CredentialError(f"{where}: {exc}") from None
    if not isinstance(table, dict):
        raise CredentialError(f"{where} must be a table")
    unknown = sorted(set(table) - {"key_env", "send_key", "headers", "body"})
    if unknown:
        raise CredentialError(
            f"{where}: unknown field {unknown[0]!r} (use key_env, send_key, headers, body)"
        )
    key_env = table.get("key_env")
    if key_env is not None and not (isinstance(key_env, str) and _VARIABLE_NAME.match(key_env)):
        raise CredentialError(f"{where}: key_env must be the name of an environment variable")
    send_key = table.get("send_key")
    if send_key is not None and not isinstance(send_key, bool):
        raise CredentialError(f"{where}: send_key must be true or false")
    headers = table.get("headers", {})
    if not isinstance(headers, dict):
        raise CredentialError(f"{where}: headers must be a table of names to text")
    for header, value in headers.items():
        if not _HEADER_NAME.match(str(header)) or not isinstance(value, str):
            raise CredentialError(f"{where}: header {_shown(str(header))} must be a name to text")
        check_secret(value, f"{where}: header {header}")
    body = table.get("body", {})
    if not isinstance(body, dict):
        raise CredentialError(f"{where}: body must be a table of request fields")
    return ServerEntry(origin, key_env, send_key, dict(headers), dict(body))


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
        raise CredentialError(f"cannot update {path}: {_reason(exc)}") from None
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


def _shown(text: str) -> str:
    """Text from a file or the user, fit for a one-line message: no user and password
    (a URL's), no control characters, short."""
    text = _USERINFO.sub("//", text)
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean[:120] + ("\u2026" if len(clean) > 120 else "")


def _json(value: Any) -> str:
    import json

    return _shown(json.dumps(value, ensure_ascii=False, default=str))


def _reason(exc: BaseException) -> str:
    return " ".join(str(getattr(exc, "strerror", None) or exc).split())[:160]
