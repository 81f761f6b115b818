"""The editor renders outside text as text, never as markup: a source check that fails
when someone adds a widget or a call that would read a string as markup.

A server error, a model or session name, a note or a path may hold ``[/x]`` or
``[link=...]``; given as a str to a widget that reads markup, it is a MarkupError (a
crash) or a style the text did not ask for. The rules, over every module of
``loomterm/tui``:

- nothing calls ``from_markup`` (``Text.from_markup``, ``Content.from_markup``);
- nothing passes ``markup=True``;
- a ``Label``, ``Static`` or ``OptionList`` passes ``markup=False``, except a Label or
  Static whose content is a string literal and that has no ``id`` (so nothing updates
  it later with other text);
- a table row (``add_row``) is given no bare str: its cells are literals or made by a
  call (``Text(...)``, ``plain_text(...)``), since a str cell is read as markup;
- a tooltip, ``border_title`` or ``border_subtitle`` (read as markup) is set from a
  literal or an attribute of a spec (``spec.help``), or through ``plain(...)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import loomterm.tui

TUI = Path(loomterm.tui.__file__).parent
MARKUP_WIDGETS = {"Label", "Static", "OptionList"}
READ_AS_MARKUP = {"tooltip", "border_title", "border_subtitle"}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _is_false(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _made_cell(arg: ast.expr) -> bool:
    """A table cell that is a literal or made by a call (never a bare str variable)."""
    if isinstance(arg, ast.Starred):
        value = arg.value
        return isinstance(value, (ast.GeneratorExp, ast.ListComp)) and isinstance(
            value.elt, ast.Call
        )
    return _literal(arg) or isinstance(arg, ast.Call)


def problems(source: str, where: str) -> list[str]:
    """Every dangerous use in ``source`` (a module's text), as ``where:line: why``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            name = _name(node.func)
            markup = _keyword(node, "markup")
            if name == "from_markup":
                found.append(f"{line}: from_markup reads its text as markup")
            if isinstance(markup, ast.Constant) and markup.value is True:
                found.append(f"{line}: markup=True")
            if name in MARKUP_WIDGETS and not _is_false(markup):
                literal = all(_literal(arg) for arg in node.args)
                if name == "OptionList" or not literal or _keyword(node, "id") is not None:
                    found.append(f"{line}: {name}(...) without markup=False")
            if name == "add_row" and not all(map(_made_cell, node.args)):
                found.append(f"{line}: add_row(...) with a str cell (read as markup)")
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr in READ_AS_MARKUP:
                    value = node.value
                    ok = (
                        _literal(value)
                        or (isinstance(value, ast.Call) and _name(value.func) == "plain")
                        or (isinstance(value, ast.Attribute) and value.attr == "help")
                        or (
                            isinstance(value, ast.BoolOp)
                            and all(
                                isinstance(v, ast.Attribute) or _literal(v) for v in value.values
                            )
                        )
                    )
                    if not ok:
                        found.append(f"{line}: {target.attr} set from text that may be outside")
    return found


def test_the_editor_reads_no_outside_text_as_markup():
    found = []
    for path in sorted(TUI.rglob("*.py")):
        found += problems(path.read_text(encoding="utf-8"), str(path.relative_to(TUI.parent)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "source",
    [
        "Label(name)",
        "Label('', id='status')",
        "Static(f'{error}')",
        "OptionList(*options)",
        "app.notify(message, markup=True)",
        "Text.from_markup(label)",
        "widget.border_title = session_name",
        "widget.tooltip = note",
        "table.add_row(name, model)",
        "table.add_row(*cells)",
    ],
)
def test_the_check_finds_each_dangerous_use(source):
    assert problems(source, "example")


@pytest.mark.parametrize(
    "source",
    [
        "Label('Sessions', classes='dialog--title')",
        "Label(name, markup=False)",
        "OptionList(*options, markup=False)",
        "widget.border_title = plain(name)",
        "label.tooltip = spec.help",
        "table.add_row(*(plain_text(c) for c in cells), key=k)",
    ],
)
def test_the_check_passes_safe_uses(source):
    assert not problems(source, "example")


async def test_a_notification_with_markup_and_escapes_is_shown_as_its_text(make_app):
    """A message holding ``[/x]`` (an export path, a server error) was a MarkupError: the
    editor's notifications are one safe line of plain text, whoever sends them."""
    from tests.tui.conftest import TERMINAL

    app = make_app()
    async with app.run_test(size=TERMINAL) as pilot:
        app.notify("wrote /tmp/[/x]/story.md", severity="error")
        app.screen.notify("server said \x1b]52;c;aGk=\x07 [bold]hi", markup=True)
        await pilot.pause(0.2)
        shown = [(n.message, n.markup) for n in app._notifications]  # noqa: SLF001
        assert shown == [
            ("wrote /tmp/[/x]/story.md", False),
            ("server said \u241b]52;c;aGk=\u2407 [bold]hi", False),
        ]
        await pilot.press("x")  # still running
        await pilot.pause(0.1)
        assert app.doc.text.endswith("x")
