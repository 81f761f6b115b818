"""Whether the Hugging Face hub can be reached from here, asked once and quickly.

Without a hub on the machine (no network, a firewall, no DNS), transformers and
huggingface_hub retry for about half a minute (``Retrying in 8s`` lines) before they
give up. A hub id that is not in the local cache is checked here first: one TCP
connection to the hub (or to the proxy the environment names), in a thread, given
``CONNECT_S`` seconds, DNS included. No answer is one line. The answer is kept for the
process.

Standard library and huggingface_hub only: the command line asks before torch is
imported.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

from loomterm.errors import ModelLoadError

CONNECT_S = 1.5  # a hub that answers connects in well under a second
DEFAULT_ENDPOINT = "https://huggingface.co"
PROXY_ENVS = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
_answers: dict[tuple[str, int], str | None] = {}
_lock = threading.Lock()


def offline() -> bool:
    """Whether the user said there is no hub (``HF_HUB_OFFLINE``)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def endpoint() -> str:
    """The hub's address (``HF_ENDPOINT`` or huggingface.co)."""
    return os.environ.get("HF_ENDPOINT", "").strip() or DEFAULT_ENDPOINT


def _host_port(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _no_proxy(host: str) -> bool:
    skip = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
    names = [name.strip().lstrip(".") for name in skip.split(",") if name.strip()]
    return "*" in names or any(host == name or host.endswith("." + name) for name in names)


def target() -> tuple[str, int] | None:
    """Where a hub request would connect first: the proxy when one is set (and the hub
    is not excluded by ``NO_PROXY``), else the hub itself."""
    hub = _host_port(endpoint())
    if hub is None:
        return None
    for name in PROXY_ENVS:
        proxy = os.environ.get(name, "").strip()
        if proxy and not _no_proxy(hub[0]):
            return _host_port(proxy) or hub
    return hub


def unreachable(timeout: float = CONNECT_S) -> str | None:
    """Why the hub cannot be reached (a short reason), or None when it connects. One
    connection per address and process; at most ``timeout`` seconds, DNS included."""
    where = target()
    if where is None:
        return f"HF_ENDPOINT={endpoint()} is not an address"
    with _lock:
        if where in _answers:
            return _answers[where]
    answer: list[str | None] = []

    def connect() -> None:
        try:
            socket.create_connection(where, timeout=timeout).close()
            answer.append(None)
        except OSError as exc:
            answer.append(exc.strerror or str(exc) or type(exc).__name__)

    thread = threading.Thread(target=connect, name="loomterm-hub-check", daemon=True)
    thread.start()
    thread.join(timeout)
    reason = answer[0] if answer else f"no answer within {timeout:g} s"
    with _lock:
        _answers[where] = reason
    return reason


def check_hub_id(repo_id: str) -> None:
    """For a hub id not in the local cache: one line (``ModelLoadError``) at once when
    there is no hub to download it from; nothing when it is cached or the hub answers."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    from loomterm.engine.models.source import hub_snapshot_folder

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return  # no hub id at all: loading says so
    if hub_snapshot_folder(repo_id) is None:  # cached: loading asks the network nothing
        check_reachable(repo_id)


def check_reachable(repo_id: str) -> None:
    """One line (``ModelLoadError``) when ``repo_id`` would have to come from a hub that
    is off (``HF_HUB_OFFLINE``) or cannot be reached (``unreachable``)."""
    if offline():
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: not a local folder or .gguf file, and not in "
            "the local Hugging Face cache (HF_HUB_OFFLINE is set)"
        )
    reason = unreachable()
    if reason is not None:
        host = target()
        where = f"{host[0]}:{host[1]}" if host else endpoint()
        raise ModelLoadError(
            f"cannot load model {repo_id!r}: not a local folder or .gguf file, not in the "
            f"local Hugging Face cache, and the hub ({where}) cannot be reached ({reason})"
        )
