"""Themes as files: Textual CSS variable declarations, turned into Textual themes.

A theme file is a ``.tcss`` file of ``$name: value;`` lines (valid Textual CSS, so an
editor highlights it). Textual's base colours (``$primary``, ``$background``...) make
the theme; ``$dark: true|false`` says which way it leans; every other variable (the
``$loom-*`` colours of the document) is passed through as a theme variable, so widget
CSS can use it. Rules other than variables are ignored.

Bundled themes live in ``themes/`` (shipped in the wheel as ``loomterm/themes``) and are
named ``loom-<file stem>``; the user's own go in ``<config>/themes/`` and are named by
their stem (a user theme may replace a bundled one of the same name).
"""

from __future__ import annotations

import re
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

from loomterm.config.locations import config_dir

DEFAULT_THEME = "loom-dark"
BASE_COLOURS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
# Colours of the document, with defaults for themes that do not set them (Textual's own).
LOOM_DEFAULTS = {
    "loom-user": "$foreground",
    "loom-model": "$success",
    "loom-import": "$secondary",
    "loom-pending": "$foreground",
    "loom-pending-background": "$boost",
    "loom-special": "$text-muted",
    "loom-control": "$warning",
    "loom-approx": "$warning",
    "loom-token-a": "$boost",
    "loom-token-b": "$panel",
    "loom-prob-1": "#1f5e2e",
    "loom-prob-2": "#3d5a1e",
    "loom-prob-3": "#6b5a12",
    "loom-prob-4": "#7a3b12",
    "loom-prob-5": "#7a1f24",
    "loom-role": "$accent",
    "loom-path": "$accent",
    "loom-bookmark": "$warning",
    # One colour per model when several models write into one tree (in table order).
    "loom-model-1": "#2aa198",
    "loom-model-2": "#d08a2e",
    "loom-model-3": "#9b7fe0",
    "loom-model-4": "#e0607e",
    "loom-model-5": "#5b9be8",
    "loom-model-6": "#8fbf3f",
    # Solid colours (a "COLOUR N%" default is blended over $surface): Textual's
    # $text-muted and $text-disabled are "auto" colours, which a widget's component
    # styles cannot resolve (they come out white on a light theme).
    "loom-guide": "$foreground 50%",
    "loom-muted": "$foreground 70%",
}
SOLID = ("loom-guide", "loom-muted")

_VARIABLE = re.compile(r"^\s*\$([A-Za-z0-9_-]+)\s*:\s*(.+?)\s*;", re.MULTILINE)
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)


class ThemeFileError(ValueError):
    """A theme file that cannot be used."""


def bundled_themes_dir() -> Path | None:
    """The folder of bundled themes: ``loomterm/themes`` when installed, the repository's
    ``themes/`` in a source checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "themes", package.parent / "themes"):
        if candidate.is_dir() and any(candidate.glob("*.tcss")):
            return candidate
    return None


def user_themes_dir() -> Path:
    return config_dir() / "themes"


def parse_theme(text: str, name: str) -> Theme:
    """A Textual theme from a theme file's text."""
    variables = {key: value for key, value in _VARIABLE.findall(_COMMENT.sub("", text))}
    if "primary" not in variables:
        raise ThemeFileError(f"theme {name!r} sets no $primary colour")
    dark = variables.pop("dark", "true").strip().lower() not in ("false", "no", "0")
    for key, value in variables.items():
        if key in BASE_COLOURS or key.startswith("loom-"):
            check_colour(name, key, value)
    base = {key: variables.pop(key) for key in BASE_COLOURS if key in variables}
    return Theme(name=name, dark=dark, variables=variables, **base)


_REFERENCE_VALUE = re.compile(r"^\$[A-Za-z0-9_-]+(\s+\d+(\.\d+)?%)?$")


def check_colour(theme: str, key: str, value: str) -> None:
    """A colour variable's value: a colour, ``$other`` (``$other 50%``) or ``COLOUR N%``;
    anything else would stop the editor when the theme's CSS is built. Textual's base
    colours take a colour only."""
    value = value.strip()
    if key in BASE_COLOURS:
        colour = value
    elif _REFERENCE_VALUE.match(value):
        return
    else:
        colour = re.sub(r"\s+\d+(\.\d+)?%$", "", value)  # "COLOUR 40%": the colour, faded
    try:
        Color.parse(colour)
    except ColorParseError:
        shown = repr(value)[:40]
        raise ThemeFileError(f"theme {theme!r}: ${key} is not a colour ({shown})") from None


def load_theme_file(path: Path, name: str | None = None) -> Theme:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ThemeFileError(f"theme {path} not readable: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ThemeFileError(f"theme {path} not readable: not UTF-8 text") from None
    return parse_theme(text, name or path.stem)


def load_themes() -> tuple[list[Theme], list[str]]:
    """Bundled then user themes, and one line per file that could not be used."""
    themes: list[Theme] = []
    problems: list[str] = []
    sources: list[tuple[Path, str]] = []
    bundled = bundled_themes_dir()
    if bundled is not None:
        sources += [(path, f"loom-{path.stem}") for path in sorted(bundled.glob("*.tcss"))]
    user = user_themes_dir()
    if user.is_dir():
        sources += [(path, path.stem) for path in sorted(user.glob("*.tcss"))]
    for path, name in sources:
        try:
            themes.append(load_theme_file(path, name))
        except ThemeFileError as exc:
            problems.append(str(exc))
    return themes, problems


_REFERENCE = re.compile(r"\$([A-Za-z0-9_-]+)")
_MIX = re.compile(r"^\s*(#[0-9A-Fa-f]{3,8}|[a-z]+\([^)]*\))\s+(\d+(?:\.\d+)?)%\s*$")


def solidify(variables: dict[str, str], names: tuple[str, ...] = SOLID) -> dict[str, str]:
    """``names`` given as ``COLOUR N%`` made solid: blended over ``$surface``."""
    out = dict(variables)
    surface = Color.parse(variables.get("surface", "#000000"))
    for name in names:
        match = _MIX.match(out.get(name, ""))
        if match:
            colour = Color.parse(match.group(1))
            out[name] = surface.blend(colour, float(match.group(2)) / 100).hex
    return out


def resolve_references(variables: dict[str, str]) -> dict[str, str]:
    """Variables whose values name other variables (``$success 40%``) with those
    names replaced by their values: Textual substitutes references only inside CSS."""
    resolved = dict(variables)
    for _ in range(5):  # references may chain a few levels deep
        changed = False
        for key, value in resolved.items():
            if "$" in value:
                new = _REFERENCE.sub(lambda m: resolved.get(m.group(1), m.group(0)), value)
                if new != value:
                    resolved[key] = new
                    changed = True
        if not changed:
            break
    return resolved
