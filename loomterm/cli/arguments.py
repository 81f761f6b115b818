"""Command-line argument types shared by the ``loomterm`` subcommands."""

from __future__ import annotations

import argparse

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
