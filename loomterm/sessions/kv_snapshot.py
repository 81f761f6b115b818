"""KV snapshots: the active path's keys and values beside a session file.

``<name>.kv.safetensors`` lets a long session continue with no prefill. The file
records the model fingerprint, the dtype and, per node, a hash of every token its KV
depends on; a snapshot from another model, dtype or token path is ignored with a
warning, never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loomterm.atomic import atomic_path
from loomterm.errors import SessionError
from loomterm.sessions.identity import model_record, same_model
from loomterm.store import SESSION_SUFFIX, pack_tokens

if TYPE_CHECKING:
    from loomterm.engine import Loom

SNAPSHOT_SUFFIX = ".kv.safetensors"
SNAPSHOT_FORMAT = "loomterm-kv"
SNAPSHOT_VERSION = "1"


def snapshot_path(session: str | os.PathLike) -> Path:
    """``story.loom`` -> ``story.kv.safetensors``."""
    session = Path(session)
    return session.with_name(session.name.removesuffix(SESSION_SUFFIX) + SNAPSHOT_SUFFIX)


def _prefix_hash(tokens: list[int]) -> str:
    return hashlib.sha256(pack_tokens(tokens)).hexdigest()


def save_kv_snapshot(loom: Loom, session: str | os.PathLike) -> Path:
    """Write the keys and values of the cursor's path beside the session file.

    The file records the model fingerprint, dtype and, per node, a hash of every token
    its KV depends on, so :func:`load_kv_snapshot` can refuse anything stale.
    """
    from safetensors.torch import save_file

    target = snapshot_path(session)
    identity = model_record(loom)
    node = loom.cursor
    with loom.exclusive():
        if node.end > 0:
            loom.next_logits(node)  # makes sure the whole path's KV is computed
        tensors: dict[str, Any] = {}
        entries = []
        path_tokens: list[int] = []
        for item in node.path():
            kv = item.kv
            if kv is not None and kv.shape[3] > 0:
                length = int(kv.shape[3])
                # clone: views into shared storage cannot be saved one by one.
                tensors[f"node.{item.id}"] = kv.detach().to("cpu").contiguous().clone()
                entries.append([item.id, length, _prefix_hash(path_tokens + item.tokens[:length])])
            path_tokens.extend(item.tokens)
            if item.tokens and (kv is None or kv.shape[3] < len(item.tokens)):
                break  # KV after a gap would not be usable anyway
    metadata = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "fingerprint": json.dumps(identity["fingerprint"], sort_keys=True),
        "dtype": identity["dtype"],
        "quant": identity.get("quant", "none"),
        "cursor": str(node.id),
        "nodes": json.dumps(entries),
    }
    try:
        with atomic_path(target) as tmp:
            save_file(tensors, str(tmp), metadata=metadata)
    except OSError as exc:
        raise SessionError(f"cannot write KV snapshot {target}: {exc.strerror or exc}") from None
    return target


def load_kv_snapshot(loom: Loom, snapshot: str | os.PathLike) -> bool:
    """Put a snapshot's KV back on the nodes it belongs to. Returns True when used.

    Anything that does not match exactly (model fingerprint, dtype, the tokens each
    node's KV depends on) is skipped with a warning; the engine then computes the KV
    itself, so a stale snapshot can cost time but never give wrong logits.
    """
    from safetensors import SafetensorError, safe_open

    snapshot = Path(snapshot)
    try:
        with safe_open(str(snapshot), framework="pt") as handle:
            meta = handle.metadata() or {}
            if meta.get("format") != SNAPSHOT_FORMAT or meta.get("version") != SNAPSHOT_VERSION:
                return _ignore(snapshot, "not a loomterm KV snapshot of this version")
            identity = model_record(loom)
            if not same_model(json.loads(meta.get("fingerprint", "{}")), identity["fingerprint"]):
                return _ignore(snapshot, "made with another model")
            if meta.get("dtype") != identity["dtype"]:
                return _ignore(snapshot, f"made in {meta.get('dtype')}, not {identity['dtype']}")
            quant = identity.get("quant", "none")
            if meta.get("quant", "none") != quant:
                return _ignore(
                    snapshot, f"made with quant {meta.get('quant', 'none')}, not {quant}"
                )
            plan = []
            for node_id, length, digest in json.loads(meta.get("nodes", "[]")):
                node = loom.tree.nodes.get(int(node_id))
                if node is None or length > len(node.tokens):
                    continue
                # The hash covers every token this KV attended to, so a match means the
                # KV is exactly that of this node on its current path.
                above = node.parent.path_tokens() if node.parent is not None else []
                if _prefix_hash(above + node.tokens[:length]) == digest:
                    plan.append((node, handle.get_tensor(f"node.{node_id}")))
    except (
        OSError, ValueError, KeyError, json.JSONDecodeError, RuntimeError, SafetensorError
    ) as exc:  # fmt: skip
        return _ignore(snapshot, f"unreadable ({exc})")
    if not plan:
        return _ignore(snapshot, "its token path no longer matches the session")
    with loom.exclusive():
        for node, kv in plan:
            node.kv = kv.to(device=loom.runner.device, dtype=loom.runner.dtype)
    return True


def _ignore(snapshot: Path, why: str) -> bool:
    warnings.warn(f"ignoring KV snapshot {snapshot.name}: {why}", stacklevel=3)
    return False
