"""Command-line argument types shared by the ``loomterm`` subcommands."""

from __future__ import annotations

import argparse
from typing import Any, Protocol

from loomterm.config.settings import SettingError, Spec


def argument_type(spec: Spec):
    """An argparse ``type`` that reads a value the way ``spec`` does, with its message."""

    def read(text: str):
        try:
            return spec.parse(text)
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    read.__name__ = spec.name
    return read


class Subcommands(Protocol):
    """What a subcommand's ``register`` needs of ``parser.add_subparsers()``: a way to
    add its own parser (argparse's class for it is private)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A new subcommand's parser, named ``name``."""
        ...
