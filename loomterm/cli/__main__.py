"""``python -m loomterm.cli``: the same as the ``loomterm`` command."""

import sys

from loomterm.cli import main

sys.exit(main())
