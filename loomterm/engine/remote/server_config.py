"""The config file's server tables: headers, body fields and keys bound to an origin.

``<config>/config.toml`` (:func:`config_path`), one ``[servers."ORIGIN"]`` table per origin
(the fields: ``loomterm.engine.remote.credentials``). A file another user can change is
refused, as ssh refuses its config.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loomterm.engine.remote.origins import CredentialError, Origin, check_secret, shown

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

CONFIG_FILE = "config.toml"
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


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
        raise CredentialError(f"cannot read {path}: {reason(exc)}") from None
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
    where = f'{path.name} [servers."{shown(name)}"]'
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
            raise CredentialError(f"{where}: header {shown(str(header))} must be a name to text")
        check_secret(value, f"{where}: header {header}")
    body = table.get("body", {})
    if not isinstance(body, dict):
        raise CredentialError(f"{where}: body must be a table of request fields")
    return ServerEntry(origin, key_env, send_key, dict(headers), dict(body))


def reason(exc: BaseException) -> str:
    """Why an OS call failed, in one short line."""
    return " ".join(str(getattr(exc, "strerror", None) or exc).split())[:160]
