"""Ratings as training data: JSON Lines of preferred and rejected continuations.

One JSON object per line, the fields preference-tuning tools read (TRL's
``DPOTrainer``, ``ORPOTrainer`` and ``RewardTrainer`` take this "standard" preference
format as it is)::

    {"prompt": "<the path's text above the branch point>",
     "chosen": "<a good branch's text>",
     "rejected": "<a bad branch's text, from the same branch point>"}

A branch is a child of a branch point with the single-child nodes below it (a row of the
branch pane); its rating is that of its first rated node (the editor rates the first).
Every good branch is paired with every bad sibling, so two good and three bad siblings
give six lines. Unrated branches and branch points without both kinds give none. The
text is what the document shows: the prompt keeps a chat's template tokens as written.
"""

from __future__ import annotations

import json

from loomterm.export.errors import ExportError
from loomterm.export.views import chain
from loomterm.store import SessionData
from loomterm.tree import BAD, GOOD, Node, rating_of


def branch_rating(node: Node) -> int | None:
    """The rating of the branch starting at ``node`` (its first rated node's)."""
    for item in chain(node):
        rating = rating_of(item)
        if rating is not None:
            return rating
    return None


def preference_pairs(data: SessionData) -> list[dict[str, str]]:
    """Every (prompt, chosen, rejected) triple of the tree, in tree order."""
    pairs = []
    for point in data.tree.root.walk():
        kids = point.children
        if len(kids) < 2:
            continue
        rated = [(kid, branch_rating(kid)) for kid in kids]
        good = [kid for kid, rating in rated if rating == GOOD]
        bad = [kid for kid, rating in rated if rating == BAD]
        if not good or not bad:
            continue
        prompt = data.path_text(point)
        for chosen in good:
            chosen_text = "".join(data.text(item) for item in chain(chosen))
            for rejected in bad:
                rejected_text = "".join(data.text(item) for item in chain(rejected))
                if chosen_text != rejected_text:
                    pairs.append(
                        {"prompt": prompt, "chosen": chosen_text, "rejected": rejected_text}
                    )
    return pairs


def render_preferences(data: SessionData) -> str:
    """The pairs as JSON Lines; none at all is a one-line :class:`ExportError`."""
    pairs = preference_pairs(data)
    if not pairs:
        raise ExportError(
            "no preference pairs to export: rate a good and a bad branch of the same "
            "branch point first"
        )
    return "".join(json.dumps(pair, ensure_ascii=False) + "\n" for pair in pairs)
