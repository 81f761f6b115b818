"""The process that converts a GGUF file, started by ``gguf.ensure_converted``.

Dequantizing holds the Python interpreter for seconds at a time: in the editor's own
process it starved the UI thread, and keys waited 200-640 ms during a first load. Here
it runs in a process of its own, and the editor only reads its reports.

Usage: ``python -m loomterm.engine.models.conversion_child FD GGUF SHA256 TARGET [--check]``.
Reports are JSON lines written to the pipe ``FD``:

- ``["progress", stage, done, total]``: ``loomterm.progress``'s protocol, as it comes;
- ``["done"]``: ``TARGET`` holds the finished conversion;
- ``["error", kind, line]``: the one-line error, ``kind`` naming its class in
  ``loomterm.errors`` (``NotCausalLMError``...).

``--check`` first refuses what loomterm cannot run (``load.check_model_config``), from
the GGUF's config, before any weight is read. A parent that goes away closes the pipe:
the next report fails, and the child removes its partial folder and leaves.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import TextIO

from loomterm.errors import LoomError
from loomterm.progress import Progress


class Reports:
    """Writes the reports; leaves the process, cleaning up, once nobody reads them."""

    def __init__(self, pipe: TextIO) -> None:
        self.pipe = pipe
        self.lock = threading.Lock()  # the heartbeat thread reports too

    def send(self, *message: object) -> None:
        """Write one report; a closed pipe (the parent is gone) ends the process."""
        try:
            with self.lock:
                self.pipe.write(json.dumps(message) + "\n")
                self.pipe.flush()
        except (BrokenPipeError, OSError):
            self.leave()

    def send_progress(self, stage: str, done: int, total: int | None) -> None:
        """A ``loomterm.progress`` callback: each call is one report."""
        self.send("progress", stage, done, total)

    @staticmethod
    def leave() -> None:
        """Remove the partial folder and exit at once, from whichever thread."""
        from loomterm.engine.models import gguf

        gguf.remove_partials()
        os._exit(3)


def main(argv: list[str]) -> int:
    """Convert, report, and return the exit status (0: done; 1: an error was reported)."""
    fd, gguf_path, sha256, target = argv[:4]
    check = "--check" in argv[4:]
    reports = Reports(os.fdopen(int(fd), "w"))
    try:
        from loomterm.engine.models import gguf
        from loomterm.engine.models.load import check_model_config

        source = Path(gguf_path)
        check_config = (lambda config: check_model_config(config, str(source))) if check else None
        gguf.convert(source, sha256, Path(target), Progress(reports.send_progress), check_config)
    except LoomError as exc:
        reports.send("error", type(exc).__name__, str(exc))
        return 1
    except Exception as exc:  # a library's failure, said in one line
        from loomterm.engine.models.gguf import short_reason

        reports.send("error", "ModelLoadError", f"cannot convert {gguf_path}: {short_reason(exc)}")
        return 1
    reports.send("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
