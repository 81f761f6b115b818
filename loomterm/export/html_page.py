"""The HTML export: one self-contained page, with each token's probability on hover."""

from __future__ import annotations

import html
import math

from loomterm import __version__
from loomterm.export.parts import parts
from loomterm.export.views import (
    author,
    bookmark_note,
    chain,
    is_chat,
    model_legend,
    model_name,
    when,
)
from loomterm.store import SessionData
from loomterm.tree import Node, Origin

CSS = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; background: #fdfdfb; }
h1 { margin-bottom: .2rem; } .info { color: #666; margin-top: 0; }
.doc { white-space: pre-wrap; font-family: ui-monospace, monospace; font-size: 14px;
       background: #fff; border: 1px solid #ddd; border-radius: 4px; padding: .8rem; }
.o-user { color: #1d4ed8; } .o-model { color: #222; } .o-edit { color: #a21caf; }
.o-import { color: #555; } .approx { text-decoration: underline dotted #d97706; }
.t:hover { background: #fde68a; } .low { background: #fee2e2; }
details { margin: .3rem 0 .3rem 1.2rem; } summary { cursor: pointer; color: #444; }
summary .cur { color: #15803d; font-weight: 600; }
.legend span { margin-right: 1rem; }
""".strip()

_ORIGIN_CLASS = {
    Origin.USER: "o-user",
    Origin.MODEL: "o-model",
    Origin.EDIT: "o-edit",
    Origin.IMPORT: "o-import",
    Origin.ROOT: "o-import",
}


def _token_title(data: SessionData, node: Node, i: int) -> str:
    logprob = node.logprobs[i] if i < len(node.logprobs) else None
    if logprob is None:
        lines = ["probability not recorded"]
    else:
        lines = [f"p = {math.exp(logprob):.3f} (logprob {logprob:.3f})"]
    top = node.top[i] if i < len(node.top) else None
    if top:
        pieces = data.pieces.get(node.id, [])
        chosen = node.tokens[i]
        for token, lp in top[:10]:
            shown = pieces[i] if token == chosen and i < len(pieces) else data.vocab.get(token)
            label = repr(shown) if shown is not None else f"#{token}"
            lines.append(f"{math.exp(lp):.3f}  {label}")
    return "\n".join(lines)


MODEL_COLOURS = ("#0f766e", "#b45309", "#7c3aed", "#be123c", "#1d4ed8", "#4d7c0f")


def _model_css() -> str:
    return " ".join(
        f".m{i} {{ color: {c}; }} .key.m{i}::before {{ content: '\\25A0 '; color: {c}; }}"
        for i, c in enumerate(MODEL_COLOURS)
    )


def _html_tokens(data: SessionData, nodes: list[Node]) -> str:
    """The nodes' tokens as spans, one ``seg`` span per part by one author (a merged
    node's parts are coloured as they were before the merge, ``export.parts``)."""
    # Several models: each one's text in its own colour (the legend names them).
    legend = [key for key, _ in model_legend(data)]
    colours = {key: i % len(MODEL_COLOURS) for i, key in enumerate(legend)}
    out = []
    for node in nodes:
        pieces = data.pieces.get(node.id, [])
        if not pieces:
            continue
        for part in parts(data, node):
            classes = ["seg", _ORIGIN_CLASS[part.origin]] + (["approx"] if node.approx else [])
            writer = node.meta.get("model") if part.origin is Origin.MODEL else None
            colour = colours.get(writer) if writer else None
            extra = f' data-model="{html.escape(str(writer), quote=True)}"' if writer else ""
            if colour is not None:
                classes.append(f"m{colour}")
            out.append(f'<span class="{" ".join(classes)}" data-node="{node.id}"{extra}>')
            out.extend(_token_spans(data, node, pieces, part.start, part.stop))
            out.append("</span>")
    return "".join(out)


def _token_spans(data: SessionData, node: Node, pieces: list[str], start: int, stop: int):
    """Tokens ``start`` to ``stop`` of ``node``: each with its probability on hover."""
    for i in range(start, min(stop, len(pieces))):
        piece = pieces[i]
        if not piece:
            continue  # first bytes of a character: its text shows on the next token
        logprob = node.logprobs[i] if i < len(node.logprobs) else None
        if logprob is None and not (i < len(node.top) and node.top[i]):
            yield html.escape(piece)  # typed text: nothing to show on hover
            continue
        cls = "t low" if logprob is not None and logprob < math.log(0.1) else "t"
        title = html.escape(_token_title(data, node, i), quote=True).replace("\n", "&#10;")
        yield f'<span class="{cls}" title="{title}">{html.escape(piece)}</span>'


def _first_author(data: SessionData, node: Node, chat: bool) -> str:
    """Who wrote the start of ``node`` (a merged node: its first part's author)."""
    first = parts(data, node)
    return author(node, chat, first[0].origin if first else None)


def _summary_text(text: str, limit: int = 70) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "\u2026"


def _legend_html(data: SessionData) -> list[str]:
    legend = model_legend(data)
    if not legend:
        return []
    items = "".join(
        f'<li><span class="key m{i % len(MODEL_COLOURS)}">{html.escape(key)}</span>: '
        f"{html.escape(text)}</li>"
        for i, (key, text) in enumerate(legend)
    )
    return [f'<ul class="models">{items}</ul>']


def render_html(data: SessionData, branch: str = "all") -> str:
    """One self-contained page: the cursor's path, then (``all``) every branch as
    nested ``<details>``. Hovering a token shows its probability and alternatives."""
    esc = html.escape
    path = data.cursor_node.path()
    on_path = {node.id for node in path}
    chat = is_chat(data)
    title = data.name or "loomterm session"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta name="generator" content="loomterm {esc(__version__)}">',
        f"<title>{esc(title)} \u00b7 loomterm</title>",
        f"<style>\n{CSS}\n{_model_css()}\n</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="info">{esc(model_name(data))} \u00b7 last change {esc(when(data.modified))}'
        f" \u00b7 {len(data.tree.nodes) - 1} nodes</p>",
        '<p class="legend"><span class="o-user">typed</span><span class="o-model">generated'
        '</span><span class="o-edit">edited</span><span class="approx">approximate KV</span>'
        "hover a token for its probability</p>",
        *_legend_html(data),
        '<section id="path">',
        "<h2>Current path</h2>",
        f'<div class="doc">{_html_tokens(data, path)}</div>',
        "</section>",
    ]
    if branch == "all":
        parts += _tree_html(data, on_path, chat)
    parts.extend(["</body>", "</html>"])
    return "\n".join(part for part in parts if part) + "\n"


def _tree_html(data: SessionData, on_path: set[int], chat: bool) -> list[str]:
    """Every branch as nested ``<details>`` (the ones on the path ``on_path`` open),
    each chain of nodes with its text."""
    esc = html.escape
    parts = ['<section id="tree">', "<h2>Every branch</h2>"]
    stack: list[tuple[str, Node | None, str]] = [("open", data.tree.root, "")]
    while stack:
        action, start, label = stack.pop()
        if action == "close":
            parts.append("</details>")
            continue
        assert start is not None
        nodes = chain(start)
        text = "".join(data.text(n) for n in nodes)
        is_root = start is data.tree.root
        if not is_root:
            current = ' <span class="cur">\u25c0 current path</span>' if start.id in on_path else ""
            bookmark = "".join(f" \u00b7 {esc(b)}" for b in (bookmark_note(n) for n in nodes) if b)
            opened = " open" if start.id in on_path else ""
            parts.append(
                f'<details{opened} data-node="{start.id}"><summary>{esc(label)} \u00b7 '
                f"{esc(_first_author(data, start, chat))}{bookmark}{current} \u2014 "
                f"{esc(_summary_text(text))}</summary>"
            )
            stack.append(("close", None, ""))
        parts.append(f'<div class="doc">{_html_tokens(data, nodes)}</div>' if text else "")
        kids = nodes[-1].children
        for i in reversed(range(len(kids))):
            stack.append(("open", kids[i], f"alternative {i + 1} of {len(kids)}"))
    parts.append("</section>")
    return parts
