"""KoboldAI's story saves: Client v1 (also KoboldAI Lite's and koboldcpp's "oldui"
save, with Lite's ``altbranches``), United v2 (``file_version`` 2) and Lite's old share
format (``ga``/``cm``/``ca``).

The story is ``prompt`` then each action in turn; an action's retries
(``actions_metadata``' ``Alternative Text``, v2's ``Options``) become its siblings, and
Lite's other branches (whole histories) become paths that share the common beginning.
Nothing marks who wrote an action, so actions are imported text; the prompt is the
writer's. v2 writes values JSON cannot hold as pickles (``"base64:..."``): they are
never unpickled, and text holding one is skipped. Lite's ``savedsettings`` can hold API
keys and private endpoints: they are never read.
"""

from __future__ import annotations

from typing import Any

from loomterm.export.foreign.builder import TreeBuilder, table_of, tables_in, text_of
from loomterm.export.text_tree import TextTree
from loomterm.tree import Origin

PICKLED = "base64:"
NOTE_SLOT = "<|>"  # where Kobold's author's-note template puts the note


def looks_like_kobold(obj: Any) -> bool:
    """A KoboldAI save: a prompt and actions (v1, Lite), ``file_version`` 2 with
    actions (United), or Lite's share format (``ga``, the story's chunks)."""
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("ga"), list) and "actions" not in obj:
        return True
    if obj.get("file_version") == 2 and isinstance(obj.get("actions"), dict):
        return True
    return isinstance(obj.get("prompt"), str) and isinstance(obj.get("actions"), list)


def from_kobold(obj: dict[str, Any], name: str = "") -> TextTree:
    """Read any KoboldAI save :func:`looks_like_kobold` accepts."""
    build = TreeBuilder(name)
    if isinstance(obj.get("ga"), list) and "actions" not in obj:
        return _share(obj, build)
    if obj.get("file_version") == 2:
        return _united(obj, build)
    return _classic(obj, build)


def _classic(obj: dict[str, Any], build: TreeBuilder) -> TextTree:
    chunks = [text_of(obj.get("prompt"))] + [text_of(a) for a in obj["actions"]]
    alternatives: dict[int, list[str]] = {}
    for key, entry in table_of(obj.get("actions_metadata")).items():
        if str(key).isdigit() and isinstance(entry, dict):
            texts = tables_in(entry.get("Alternative Text"))
            alternatives[int(key)] = [text_of(a.get("Text")) for a in texts]
    cursor = _chunks(build, chunks, alternatives)
    altbranches = obj.get("altbranches")
    for branch in altbranches if isinstance(altbranches, list) else []:  # Lite's histories
        if isinstance(branch, list) and branch:
            _chunks(build, [text_of(chunk) for chunk in branch], {})
    if obj.get("savedsettings"):
        build.notice("dropped KoboldAI Lite's saved settings (they can hold API keys and endpoints)")  # fmt: skip
    if obj.get("savedir"):
        build.notice("ignored savedir (a folder on the machine that wrote the file)")
    build.context(
        obj.get("memory", ""),
        _note(obj.get("authorsnote"), obj.get("anotetemplate")),
        _world(build, tables_in(obj.get("worldinfo"))),
    )
    return build.finish(cursor)


def _united(obj: dict[str, Any], build: TreeBuilder) -> TextTree:
    register = table_of(table_of(obj.get("actions")).get("actions"))
    chunks, alternatives = [_unpickled(build, obj.get("prompt"))], {}
    steps = sorted((int(k), v) for k, v in register.items() if str(k).isdigit() and isinstance(v, dict))  # fmt: skip
    for _, step in steps:
        chunks.append(_unpickled(build, step.get("Selected Text")))
        options = tables_in(step.get("Options"))
        alternatives[len(chunks) - 2] = [_unpickled(build, o.get("text")) for o in options]
    cursor = _chunks(build, chunks, alternatives)
    entries = table_of(table_of(obj.get("worldinfo_v2")).get("entries"))
    world = [(e.get("key"), e.get("content")) for e in entries.values() if isinstance(e, dict)]
    build.context(
        _unpickled(build, obj.get("memory")),
        _note(_unpickled(build, obj.get("authornote")), obj.get("authornotetemplate")),
        world,
    )
    return build.finish(cursor)


def _share(obj: dict[str, Any], build: TreeBuilder) -> TextTree:
    cursor = _chunks(build, [text_of(chunk) for chunk in obj["ga"]], {})
    world = _world(build, tables_in(obj.get("cwi")))
    build.context(obj.get("cm", ""), _note(obj.get("ca"), obj.get("ct")), world)
    return build.finish(cursor)


def _chunks(build: TreeBuilder, chunks: list[str], alternatives: dict[int, list[str]]) -> int:
    """The story's chunks as one path (the prompt the writer's, the rest imported),
    each action's retries as its siblings; returns the path's last node."""
    node = 0
    for index, chunk in enumerate(chunks):
        parent = node
        if not chunk and index:
            continue
        node = build.add_path(parent, [chunk], Origin.USER if index == 0 else Origin.IMPORT)
        for other in alternatives.get(index - 1, []) if index else []:
            if other and other != chunk:
                build.add_path(parent, [other])
    return node


def _world(build: TreeBuilder, entries: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
    """Lite's world info as (keys, text), leaving out the entries it marks disabled
    (``widisabled``): loomterm's entries are always on, so they would wake."""
    kept = [(e.get("key"), e.get("content")) for e in entries if e.get("widisabled") is not True]
    off = len(entries) - len(kept)
    if off:
        build.notice(f"left out {off} world info entr{'y' if off == 1 else 'ies'} marked disabled")  # fmt: skip
    return kept


def _note(note: Any, template: Any) -> str:
    """The author's note as Kobold sends it: its template with the note in the slot."""
    note = text_of(note)
    if note.strip() and isinstance(template, str) and NOTE_SLOT in template:
        return template.replace(NOTE_SLOT, note)
    return note


def _unpickled(build: TreeBuilder, value: Any) -> str:
    """A v2 text field; a pickled value is never loaded (loading runs code)."""
    text = text_of(value)
    if text.startswith(PICKLED):
        build.notice("skipped pickled values in a KoboldAI United save (loading them would run code)")  # fmt: skip
        return ""
    return text
