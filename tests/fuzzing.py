"""What the fuzz tests share: their example budget, hostile values, and the check that
a command ended in success or in one clear line.

Budgets are sized for CI (all fuzz tests together add a couple of minutes on two
cores) and derandomized (CI runs the same examples every time).
``LOOMTERM_FUZZ_EXAMPLES=10`` multiplies every budget by ten, with fresh random
examples, for a longer local session.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# A model fingerprint: a tree that names one imports without loading any model.
FINGERPRINT = {"name": "m", "config": "a" * 64, "weights": "b" * 64, "tokenizer": "c" * 64}

SCALE = float(os.environ.get("LOOMTERM_FUZZ_EXAMPLES", "1") or 1)


def budget(examples: int) -> settings:
    """Hypothesis settings for ``examples`` examples (scaled by the environment), with
    no per-example deadline (a loaded CI machine is slow, not wrong)."""
    return settings(
        max_examples=max(1, int(examples * SCALE)),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.function_scoped_fixture,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
        derandomize=SCALE <= 1,
        database=None,
    )


# A value of the wrong kind for almost any field: huge and negative numbers, floats
# that are whole and floats that are not, infinities, text with escapes and controls,
# and containers.
TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30
) | st.sampled_from(["", "\x1b[31mred\x1b[0m", "\n\r\t", "\u202e\u200b", "%s%n{0}", "\x00"])
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=2**31 - 2, max_value=2**64 + 2),
    st.integers(min_value=-(2**64), max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 1.5, -1.0, 1e308, -1e308, 2.0**31]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
HOSTILE = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)

# JSON that Python's json module writes for a float too large to hold: 1e999 in the
# file, which reads back as infinity.
HUGE_LITERAL = "1e999"


def dumps(obj: Any) -> str:
    """JSON text for ``obj``; the string ``"<1e999>"`` becomes the bare literal 1e999."""
    return json.dumps(obj, ensure_ascii=False).replace('"<1e999>"', HUGE_LITERAL)


def digest(path: Path) -> str:
    """The file's bytes, hashed (to prove a reader left it as it was)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``loomterm.cli.main(argv)`` in this process: (exit code, stdout, stderr). An
    exception escaping it is a traceback a user would see: it fails the test."""
    from loomterm.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own refusal: exit code 2 and a usage line
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def assert_clean_end(code: int, err: str, *, allowed=(0, 1, 2)) -> None:
    """Success, or a refusal that is one line (argparse's adds its usage lines) and
    never a traceback."""
    assert code in allowed, (code, err)
    assert "Traceback" not in err, err
    if code == 0:
        return
    lines = [line for line in err.splitlines() if line.strip()]
    if code == 2:  # argparse's: its usage, then one "loomterm ...: error: ..." line
        assert lines and lines[-1].startswith("loomterm") and ": error: " in lines[-1], err
        return
    # Progress lines and warnings may come before it; the refusal is one line.
    errors = [line for line in lines if line.startswith("loomterm: ") and "warning:" not in line]
    assert len(errors) == 1 and lines[-1] == errors[0], err
