"""Keys typed before the editor has the terminal reach it as they were typed.

Until Textual puts the terminal in raw mode (half a second to a second after launch, or
the whole model load where the model is loaded first), the terminal is in its normal
"cooked" mode, and the kernel's line discipline rewrites input as it arrives: a carriage
return becomes a line feed (``ICRNL``), so a pasted CRLF reaches the editor as two line
breaks, and every key is echoed over the screen. :func:`keys_as_typed` switches that
off at once, as the editor's run begins (no Textual, standard library only): no
translation, no echo, no line buffering, signals kept (ctrl+c still stops a load).
Textual then takes the terminal from this mode and gives it back; on leaving, the mode
from before is restored. Keys already in the input queue were translated on arrival:
those it cannot mend.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def keys_as_typed() -> Iterator[None]:
    """Within the block, keys reach the process untranslated and unechoed, where
    standard input and output are a terminal; elsewhere it does nothing."""
    try:
        import termios
    except ImportError:  # not a POSIX terminal (Windows): Textual's driver reads keys
        yield
        return
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        yield
        return
    fd = sys.stdin.fileno()
    try:
        before = termios.tcgetattr(fd)
    except termios.error:
        yield
        return
    mode = [*before[:6], list(before[6])]
    mode[0] &= ~(termios.ICRNL | termios.INLCR | termios.IGNCR)  # iflag: CR stays CR
    mode[3] &= ~(termios.ICANON | termios.ECHO | termios.IEXTEN)  # lflag: keys as typed
    mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, mode)
    try:
        yield
    finally:
        with contextlib.suppress(termios.error):
            termios.tcsetattr(fd, termios.TCSANOW, before)
