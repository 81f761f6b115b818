"""Server origins and the secrets bound to them: what an origin is, and whether a value
may go in a header (``loomterm.engine.remote.credentials`` says which goes where).

Origins are compared exactly: scheme, host (lower case, IDNA-encoded, no trailing dot)
and port (the scheme's default filled in).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from loomterm.errors import ServerError

DEFAULT_PORTS = {"http": 80, "https": 443}
# A header or body field whose name says it carries a secret: masked when shown, never
# sent over plain http to a host that is not loopback, masked in a server's message.
_SECRET_NAME = re.compile(r"auth|key|token|secret|cookie|session|passw|credential", re.I)
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
            raise CredentialError(f"{shown(text)} is not a server address") from None
        if scheme in DEFAULT_PORTS and host and not 0 < port < 65536:
            raise CredentialError(f"{shown(text)} is not a server address (port {port}?)")
        if scheme not in DEFAULT_PORTS or not host:
            raise CredentialError(
                f"{shown(text)} is not a server address (use http:// or https://)"
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


def shown(text: str) -> str:
    """Text from a file or the user, fit for a one-line message: no user and password
    (a URL's), no control characters, short."""
    text = _USERINFO.sub("//", text)
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean[:120] + ("\u2026" if len(clean) > 120 else "")
