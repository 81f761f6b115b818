"""The Linux terminal driver, reading input with loomterm's own parser.

Textual's :class:`~textual.drivers.linux_driver.LinuxDriver` does everything else
(terminal modes, output, resizes); only its input thread is replaced, with the same
loop as Textual's fed to :class:`loomterm.tui.terminal.parser.TerminalParser`.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder

from textual.drivers.linux_driver import LinuxDriver

from loomterm.tui.terminal.parser import TerminalParser

READ_SIZE = 4096
"""How much input one read takes at most."""

POLL_SECONDS = 0.1
"""How long one wait for input lasts: how often the exit flag and the escape delay
are looked at when no input comes."""


class LoomDriver(LinuxDriver):
    """Textual's Linux driver with loomterm's input parser (pastes read whole and in
    order, whatever they hold; see :mod:`loomterm.tui.terminal.parser`)."""

    def run_input_thread(self) -> None:
        """Wait for input and dispatch its events until the driver stops (Textual's
        loop, with loomterm's parser)."""
        parser = TerminalParser()
        decode = getincrementaldecoder("utf-8")().decode
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)

        def read(ready: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for index, (_, mask) in enumerate(ready):
                if mask & selectors.EVENT_READ:
                    last = index == len(ready) - 1
                    text = decode(os.read(self.fileno, READ_SIZE), final=final and last)
                    if not text:
                        break  # stdin is a pipe and it ended
                    for event in parser.feed(text):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set():
                read(selector.select(POLL_SECONDS))
            selector.unregister(self.fileno)
            read(selector.select(POLL_SECONDS), final=True)
        finally:
            selector.close()
            parser.close()  # as Textual's: what is pending at the end is dropped
