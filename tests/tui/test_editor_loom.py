"""The loading stand-in (``PreviewLoom``) and the real ``Loom`` both give the editor
every member of ``EditorLoom``, with signatures it can call the same way: neither can
drift from what the editor uses of it."""

from __future__ import annotations

import inspect
import re
import typing

import pytest

from loomterm.engine import Loom
from loomterm.sessions.opening import PreviewLoom
from loomterm.tui.editor_loom import EditorLoom


def protocol_members() -> dict[str, object]:
    """Every member the protocol declares: its methods and properties by their object,
    its plain attributes by their annotation."""
    members: dict[str, object] = {}
    for name, value in vars(EditorLoom).items():
        if not name.startswith("_") and (callable(value) or isinstance(value, property)):
            members[name] = value
    for name in EditorLoom.__annotations__:
        members.setdefault(name, "attribute")
    return members


def sets_in_init(implementation, name: str) -> bool:
    """Whether ``implementation.__init__`` sets ``self.<name>`` (annotated or not)."""
    source = inspect.getsource(implementation.__init__)
    return re.search(rf"self\.{name}\b\s*(:[^=\n]*)?=", source) is not None


def parameters(function) -> list[tuple[str, object]]:
    """The parameters after ``self`` as (name, kind), the way a caller passes them."""
    signature = inspect.signature(function)
    return [(p.name, p.kind) for p in list(signature.parameters.values())[1:]]


def test_the_protocol_names_what_the_editor_reads() -> None:
    members = protocol_members()
    for name in ("tree", "cursor", "codec", "settings", "subscribe", "kv_bytes", "progress"):
        assert name in members
    assert typing.get_origin(EditorLoom) is None and getattr(EditorLoom, "_is_protocol", False)


@pytest.mark.parametrize("implementation", [Loom, PreviewLoom], ids=["Loom", "PreviewLoom"])
def test_each_loom_has_every_member_with_a_compatible_signature(implementation) -> None:
    init = inspect.signature(implementation.__init__).parameters
    for name, member in protocol_members().items():
        own = inspect.getattr_static(implementation, name, None)
        if member == "attribute":
            # Set in __init__ (no class attribute) or a property with a setter.
            if own is None:
                assert sets_in_init(implementation, name), f"{implementation.__name__} lacks {name}"
            elif isinstance(own, property):
                assert own.fset is not None, f"{implementation.__name__}.{name} is read-only"
            continue
        if isinstance(member, property):
            if own is None:  # a plain attribute set in __init__ reads the same
                assert sets_in_init(implementation, name), f"{implementation.__name__} lacks {name}"
            else:
                assert isinstance(own, property), f"{implementation.__name__}.{name}"
                assert member.fset is None or own.fset is not None, (
                    f"{implementation.__name__}.{name} cannot be set"
                )
            continue
        assert own is not None, f"{implementation.__name__} lacks {name}()"
        assert callable(own), f"{implementation.__name__}.{name} is not a method"
        assert parameters(own) == parameters(member), (
            f"{implementation.__name__}.{name}{inspect.signature(own)} differs from "
            f"EditorLoom.{name}{inspect.signature(member)}"
        )
    assert init is not None
