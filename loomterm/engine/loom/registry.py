"""Several models behind one Loom: who they are, which one is active, who owns node KV.

The tree holds the token ids of one tokenizer. A model joins a loom only when its
tokenizer is that tokenizer (:func:`vocab_mismatch`: the same vocabulary size, the same
ids for a probe text full of hard cases, and, where both sides have the vocabulary at
hand, the same token-to-id table); text is never re-tokenized across vocabularies.

Every model has a short key (``Models.key_for``): model-written nodes carry it in
``node.meta["model"]``, and the session keeps a table, key to record
(:func:`model_record`: name, kind, source without secrets, precision, fingerprint, and
what reopening it takes: dtype and quant of a local model, the server model asked for and
the tokenizer of a remote one), so a tree remembers who wrote what after the runners are
gone (``recorded`` entries), and a reopened session can attach them again
(:func:`reopen_plan`; ``Models.state`` says which were attached and which was active).

Node KV (``node.kv``) belongs to one local runner, the *KV owner*; any other local
runner runs without node KV (``LocalRunner.without_node_kv``): it keeps only its own
working cache, reused by common prefix, and recomputes the rest. Remote runners never
had node KV. Standard library only (the runners are duck-typed).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loomterm.errors import InputError

if TYPE_CHECKING:
    from loomterm.engine.runner import Runner

# Hard cases for a tokenizer: accents, CJK, an emoji, digits, runs of spaces, a special
# token written out. Two tokenizers that agree here and on the vocabulary size are the
# same for loomterm's purposes (a server can say no more than this).
PROBE_TEXT = (
    "Once upon a time, 1234 naïve cafés sold 日本語 crêpes 🙂 at 9:30 p.m.\n\n"
    "  <|im_start|>user\nWhat's this?\tdef f(x):\n    return x ** 2  # done"
)
UNKNOWN_VOCAB = 1 << 31  # a remote runner's vocabulary size before it knows better


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()


def vocab_key(runner: Runner) -> dict[str, Any]:
    """What identifies ``runner``'s tokenizer: ``size`` (None: unknown), ``probe`` (a
    digest of its ids for :data:`PROBE_TEXT`) and ``table`` (a digest of the whole
    token-to-id table, None where only a server can tokenize)."""
    tokenizer = getattr(runner, "tokenizer", None)
    ids = [int(t) for t in runner.encode(PROBE_TEXT, False)]
    if tokenizer is not None:
        size: int | None = len(tokenizer)
        table = _digest(sorted(tokenizer.get_vocab().items()))
    else:
        size = runner.vocab_size if runner.vocab_size < UNKNOWN_VOCAB else None
        table = None
    return {"size": size, "probe": _digest(ids), "table": table}


def vocab_mismatch(tree: dict[str, Any], other: dict[str, Any]) -> str | None:
    """Why a tokenizer with key ``other`` cannot write into a tree of ``tree``'s tokens
    (one clause), or None when they are the same tokenizer."""
    if tree.get("size") and other.get("size") and tree["size"] != other["size"]:
        return f"its vocabulary has {other['size']} tokens, the tree's {tree['size']}"
    if tree.get("probe") != other.get("probe"):
        return "it tokenizes the same text into other ids"
    if tree.get("table") and other.get("table") and tree["table"] != other["table"]:
        return "its token table differs"
    return None


def model_kind(runner: Runner) -> str:
    """``local`` for a model in this process, else the server's kind (``llama-server``,
    ``vllm``, ``sglang``, ``openai``)."""
    server = runner.identity().get("server")
    if isinstance(server, dict):
        return str(server.get("kind") or "server")
    return "local"


def model_record(runner: Runner) -> dict[str, Any]:
    """What the session's model table keeps about ``runner``: name, kind, source (a path,
    or a URL without user, password or query), where it ran, precision, fingerprint."""
    identity = runner.identity()
    kind = model_kind(runner)
    record: dict[str, Any] = {
        "name": str(identity.get("name") or runner.name),
        "kind": kind,
        "source": identity.get("source"),
        "precision": getattr(runner, "precision", None) or identity.get("dtype"),
        "fingerprint": dict(identity.get("fingerprint") or {}),
    }
    if kind == "local":
        record["dtype"] = identity.get("dtype")
        record["quant"] = identity.get("quant") or "none"
        if identity.get("backend"):  # llama.cpp; a record without one ran on torch
            record["backend"] = identity["backend"]
    else:
        server = identity.get("server") or {}
        record["server_model"] = server.get("model")
        record["server_model_arg"] = server.get("model_arg")
        record["tokenizer_source"] = server.get("tokenizer_source")
    return record


SERVER_KINDS = ("llama-server", "vllm", "sglang", "openai")  # ``remote.servers.KINDS``


@dataclass(frozen=True)
class Reopen:
    """How to get a recorded model back: ``Loom.open_model(source, **options)``.

    Attributes:
        source: A local folder, ``.gguf`` file, hub id or default model's name; or a
            server's URL (never with a key: a key comes from the environment only).
        local: True for a model loaded in this process.
        options: ``load_model``'s ``dtype`` and ``quant``, or ``remote.connect``'s
            ``server_kind``, ``server_model``, ``tokenizer`` and ``expect``.
    """

    source: str
    local: bool
    options: dict[str, Any]


def record_precision(record: dict[str, Any]) -> tuple[str, str]:
    """A local record's ``(dtype, quant)``: its own fields, or (a record written before
    they were kept) read back from its precision label (``float32``, ``int8 (bfloat16)``)."""
    dtype, quant = record.get("dtype"), record.get("quant")
    label = str(record.get("precision") or "")
    found = re.fullmatch(r"\s*(\w+)\s*\((\w+)\)\s*", label)
    if found:
        quant = quant or found.group(1)
        dtype = dtype or found.group(2)
    elif label and label != "server":
        dtype = dtype or label.strip()
    return str(dtype or "auto"), str(quant or "none")


def reopen_plan(record: dict[str, Any]) -> Reopen:
    """What reopening the model of ``record`` takes; a one-line :class:`InputError`
    (what is missing) when it cannot be reopened from what the record holds."""
    source = str(record.get("source") or "").strip()
    if not source:
        raise InputError("the session records no source for it")
    if record.get("kind", "local") == "local":
        path = os.path.expanduser(source)
        if os.path.isabs(path) and not os.path.exists(path):
            what = "file" if path.endswith(".gguf") else "folder"
            raise InputError(f"its {what} {source} is gone")
        dtype, quant = record_precision(record)
        return Reopen(source, True, {"dtype": dtype, "quant": quant})
    kind = record.get("kind")
    tokenizer = record.get("tokenizer_source")
    if isinstance(tokenizer, str) and os.path.isabs(tokenizer) and not os.path.exists(tokenizer):
        tokenizer = None  # gone from here: let the server's own be found again
    options = {
        "server_kind": kind if kind in SERVER_KINDS else None,
        "server_model": record.get("server_model_arg"),
        "tokenizer": tokenizer,
        "expect": dict(record.get("fingerprint") or {}) or None,
        "named_by": "file",  # a session file's URL: no key unless allowed for its origin
    }
    return Reopen(source, False, options)


FINGERPRINT_KEYS = ("config", "weights", "tokenizer")


def same_fingerprint(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two table records name the same model (config, weights, tokenizer, at
    least one of them known), wherever it is."""
    fa, fb = a.get("fingerprint") or {}, b.get("fingerprint") or {}
    known = any(fa.get(k) for k in FINGERPRINT_KEYS)
    return known and all(fa.get(k) == fb.get(k) for k in FINGERPRINT_KEYS)


def same_record(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two table records name the same model at the same place."""
    fa, fb = a.get("fingerprint") or {}, b.get("fingerprint") or {}
    same = all(fa.get(k) == fb.get(k) for k in FINGERPRINT_KEYS)
    return a.get("source") == b.get("source") and same


def slug(name: str) -> str:
    """A short key from a model's name: its last path part, safe characters only."""
    tail = re.split(r"[\\/]", name.strip().rstrip("/\\"))[-1] or "model"
    tail = re.sub(r"^https?:", "", tail)
    return re.sub(r"[^A-Za-z0-9._@:-]+", "-", tail).strip("-")[:40] or "model"


@dataclass
class Slot:
    """One model of the loom: its key, its runner (None: only recorded, from the
    session file) and its table record. A recorded model is *wanted* when it was
    attached when the session was last changed (``Models.adopt``): reopening the
    session attaches it again, and one that cannot come back keeps ``missing`` (why)
    and stays wanted, so the next open tries it again."""

    key: str
    runner: Runner | None
    record: dict[str, Any] = field(default_factory=dict)
    wanted: bool = False
    missing: str | None = None


class Models:
    """The loom's models, in the order they joined (the order colours follow).

    Attributes:
        active: The key of the model the loom's operations use.
        kv_owner: The key of the local runner that owns node KV, or None.
    """

    def __init__(self, runner: Runner) -> None:
        key = slug(runner.name)
        self._slots: dict[str, Slot] = {key: Slot(key, runner, model_record(runner))}
        self.active = key
        self.kv_owner: str | None = key if runner.capabilities.node_kv else None
        self._vocab: dict[str, Any] | None = None
        # The session's active model while it is only recorded (``adopt``): kept in
        # ``state`` until it comes back or another is made active (``Loom.use``).
        self.wanted_active: str | None = None

    # -- reading -----------------------------------------------------------------------
    def runner(self, key: str | None = None) -> Runner:
        """The runner of ``key`` (None: the active one); a one-line error otherwise."""
        slot = self._slots.get(self.active if key is None else key)
        if slot is None or slot.runner is None:
            known = ", ".join(k for k, s in self._slots.items() if s.runner is not None)
            raise InputError(f"no model {key!r} is attached (attached: {known})")
        return slot.runner

    def runners(self) -> dict[str, Runner]:
        """Attached runners by key."""
        return {k: s.runner for k, s in self._slots.items() if s.runner is not None}

    def table(self) -> dict[str, dict[str, Any]]:
        """Key to record for every model that is or was in this tree."""
        return {k: dict(s.record) for k, s in self._slots.items()}

    def state(self) -> dict[str, Any]:
        """What the session keeps besides the table: ``active`` (the active key) and
        ``attached`` (the keys attached now, and those wanted but not reopened)."""
        wanted = [k for k, s in self._slots.items() if s.runner is not None or s.wanted]
        active = self.active
        slot = self._slots.get(self.wanted_active or "")
        if slot is not None and slot.runner is None and slot.wanted:
            active = slot.key  # it did not come back: it is still the one to make active
        return {"active": active, "attached": wanted}

    def recorded(self) -> dict[str, Slot]:
        """The slots with no runner (only recorded), by key."""
        return {k: s for k, s in self._slots.items() if s.runner is None}

    def key_of(self, runner: Runner) -> str | None:
        return next((k for k, s in self._slots.items() if s.runner is runner), None)

    def tree_vocab(self) -> dict[str, Any]:
        """The tree's tokenizer key (the first runner's), computed once."""
        if self._vocab is None:
            first = next(s.runner for s in self._slots.values() if s.runner is not None)
            self._vocab = vocab_key(first)
        return self._vocab

    # -- changing ----------------------------------------------------------------------
    def fresh_key(self, name: str) -> str:
        base = slug(name)
        key, n = base, 2
        while key in self._slots:
            key, n = f"{base}-{n}", n + 1
        return key

    def check(self, name: str, runner: Runner) -> None:
        """Refuse, in one line, a runner whose tokenizer is not the tree's."""
        why = vocab_mismatch(self.tree_vocab(), vocab_key(runner))
        if why is not None:
            who = name if name == slug(runner.name) else f"{name} ({runner.name})"
            raise InputError(
                f"{who} cannot join this tree: {why}; a tree holds the "
                "token ids of one tokenizer (re-tokenizing across vocabularies is not done)"
            )

    def add(self, key: str, runner: Runner, named: bool = True) -> Slot:
        """Attach ``runner`` as ``key``. A recorded entry of the same model takes it
        instead, keeping its key: the same source and fingerprint, or the same
        fingerprint found elsewhere (a folder that moved) when ``key`` is that entry's
        or was not ``named`` by the caller (made from the model's name)."""
        record = model_record(runner)
        recorded = [s for s in self._slots.values() if s.runner is None]
        same = [s for s in recorded if same_record(s.record, record)]
        moved = [
            s
            for s in recorded
            if same_fingerprint(s.record, record) and (s.key == key or not named)
        ]
        if same or moved:
            slot = (same or moved)[0]
            slot.runner, slot.record, slot.missing, slot.wanted = runner, record, None, False
            return slot
        taken = self._slots.get(key)
        if taken is not None:
            what = "an attached model" if taken.runner is not None else "a recorded model"
            raise InputError(f"{key!r} is the key of {what}: choose another name")
        slot = self._slots[key] = Slot(key, runner, record)
        return slot

    def adopt(
        self,
        table: dict[str, dict[str, Any]],
        attached: list[str] | None = None,
        active: str | None = None,
    ) -> None:
        """Take in a session's recorded table: its entries join as recorded models, and
        an attached runner that one of them names takes that entry's key. The entries
        ``attached`` names (None, a file that does not say: all) are *wanted*, and
        ``active`` is the key to make active once it is attached (``wanted_active``)."""
        self.wanted_active = active
        for key, record in table.items():
            if not isinstance(record, dict):
                continue
            match = next(
                (
                    s
                    for s in self._slots.values()
                    if s.runner is not None and same_record(s.record, record)
                ),
                None,
            )
            if match is not None:
                if match.key != key:
                    if key in self._slots:  # another model took the key: move it aside
                        self._rename(key, self.fresh_key(key))
                    self._rename(match.key, key)
                continue
            if key in self._slots:
                self._rename(key, self.fresh_key(key))
            wanted = attached is None or key in attached
            self._slots[key] = Slot(key, None, dict(record), wanted=wanted)

    def _rename(self, old: str, new: str) -> None:
        """Give slot ``old`` the key ``new``, keeping its place in the order."""
        self._slots = {(new if k == old else k): s for k, s in self._slots.items()}
        self._slots[new].key = new
        if self.active == old:
            self.active = new
        if self.kv_owner == old:
            self.kv_owner = new

    def drop(self, key: str) -> None:
        """Forget ``key``'s runner; its record stays in the table."""
        slot = self._slots[key]
        slot.runner, slot.wanted, slot.missing = None, False, None
