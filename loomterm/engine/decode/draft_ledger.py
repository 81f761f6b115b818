"""Whether drafting pays, from what the passes of this generation cost and yielded.

A drafted pass verifies the pending token and ``d`` drafts in one forward: it costs
more than a plain step (one token) and yields ``1 + accepted`` tokens. The static
``draft_tree.Cost`` model guesses that cost; how much more it really is depends on the
machine, its load, the precision and the path length, and a pass also carries work the
model never sees (proposing the drafts, a choice per verified row, their records).
So ``auto`` measures it. Each step's wall time is recorded with the tokens it emitted:

- a **plain step** (the pending token alone) yields one token in ``plain`` seconds,
  the median of the recent ones (a busy moment on a shared machine moves a mean);
- a **drafted step** yields ``tokens`` in ``seconds``, sums over the recent drafted
  steps with old ones fading (``decay`` a step: a window of a few passes).

Drafting pays while a drafted pass yields at least what its time would give in plain
steps: ``tokens / seconds >= 1 / plain``. After a window of passes that do not, only
probes draft (``drafted``): a burst of a few drafted passes at the start of each
generation and every few steps, further apart after each burst that does not pay. A
burst, not one pass: about half the passes that pay on average accept nothing, so one
pass says little. A burst that pays turns drafting on again.

The same measurements calibrate the static model: ``calibrated(cost)`` scales its
extra cost so that a pass of the mean drafted size costs what was measured, so the
depth each draft source is given (``draft_tree.Acceptance``) follows the machine too.

Nothing here changes which token is emitted (the acceptance rule does that): a wrong
judgement costs time, never text.
"""

from __future__ import annotations

import statistics
from collections import deque

from loomterm.engine.decode.draft_tree import Cost

# Plain steps kept for their median.
PLAIN_WINDOW = 15
# While every step drafts, one in this many is a plain step, so that ``plain`` follows
# the machine's load and the path's length.
PLAIN_EVERY = 64
# While drafting does not pay, probes of PROBE_BURST drafted passes go out
# ``probe_every`` steps apart, the gap doubling (up to this) after each that does not
# pay either.
MAX_PROBE_GAP = 64
PROBE_BURST = 4
# The calibration's scale of the static model's extra cost stays within these.
SCALE_RANGE = (0.25, 8.0)


class Ledger:
    """Tokens and seconds of recent passes, for one regime (greedy or sampled) of one
    runner, kept across generations (``decode.drafted.KeptDrafting``).

    ``warmup``: drafted steps measured before the ledger may say drafting does not pay
    (it drafts to learn). ``always``: the ``tree`` and ``lookahead`` modes, which draft
    whatever it costs; the ledger still measures.
    """

    def __init__(
        self, decay: float = 0.75, warmup: int = 4, always: bool = False, probe_every: int = 8
    ) -> None:
        self.decay, self.warmup, self.always = decay, warmup, always
        self.probe_every = probe_every
        self.tokens = 0.0  # faded sums over drafted steps
        self.seconds = 0.0
        self.steps = 0.0
        self.drafts = 0.0  # drafted tokens sent
        self.drafted = 0  # drafted steps measured, ever
        self.plains: deque[float] = deque(maxlen=PLAIN_WINDOW)
        self.since_plain = 0  # steps since the last plain one
        # The probe schedule runs across generations: a gap longer than a generation
        # still comes round.
        self.probe_gap = probe_every
        self.until_probe = 0
        self.burst = 0  # probe passes left in the current burst

    # -- what was measured -------------------------------------------------------------
    def record(self, drafts: int, tokens: int, seconds: float) -> None:
        """One step: ``drafts`` tokens drafted (0: a plain step), ``tokens`` emitted, in
        ``seconds`` of wall time."""
        if drafts <= 0:
            self.plains.append(seconds)
            self.since_plain = 0
            return
        self.since_plain += 1
        d = self.decay
        self.tokens = self.tokens * d + tokens
        self.seconds = self.seconds * d + seconds
        self.steps = self.steps * d + 1.0
        self.drafts = self.drafts * d + drafts
        self.drafted += 1

    def begin(self) -> None:
        """A new generation: keep what was learned against drafting, but cap the credit
        for it at a little over break-even (a replay's run of hits says little about a
        regeneration from elsewhere), so a losing drafted step or two turn it off; and
        probe at once."""
        plain = self.plain
        if plain is not None and self.seconds > 0:
            self.tokens = min(self.tokens, 1.1 * self.seconds / plain)
        # Each generation has new sources (the sibling written last): its first step
        # probes them.
        self.until_probe = min(self.until_probe, 1)

    @property
    def plain(self) -> float | None:
        """Seconds of a plain step (median of the recent ones), None before any."""
        return statistics.median(self.plains) if self.plains else None

    @property
    def cost_ratio(self) -> float | None:
        """What a recent drafted pass cost, in plain steps (None until both are known)."""
        plain = self.plain
        if plain is None or self.steps == 0:
            return None
        return self.seconds / self.steps / plain

    @property
    def yield_per_pass(self) -> float:
        """Tokens a recent drafted pass emitted (0 before any)."""
        return self.tokens / self.steps if self.steps else 0.0

    # -- what to do --------------------------------------------------------------------
    @property
    def wants_plain(self) -> bool:
        """Whether the next step should be plain, to time one: none timed yet after
        the warm-up, or none for ``PLAIN_EVERY`` steps."""
        learnt = self.drafted >= self.warmup
        return (learnt and not self.plains) or self.since_plain >= PLAIN_EVERY

    @property
    def pays(self) -> bool:
        """Whether a drafted pass yields at least its cost in plain steps (True while
        learning: fewer than ``warmup`` drafted steps, or no plain step timed yet)."""
        ratio = self.cost_ratio
        if self.always or self.drafted < self.warmup or ratio is None:
            return True
        return self.yield_per_pass >= ratio

    def probe_due(self) -> bool:
        """Whether this step probes (one step of the schedule passes)."""
        if self.burst > 0:
            self.burst -= 1
            return True
        self.until_probe -= 1
        if self.until_probe > 0:
            return False
        self.until_probe = self.probe_gap
        # While drafting pays, a probe is one pass (it tries the sources judged not to).
        self.burst = 0 if self.pays else PROBE_BURST - 1
        return True

    def probed(self) -> None:
        """A probe pass was measured (``record``): at the end of its burst, drafting
        that pays keeps probes close; drafting that does not doubles the gap."""
        if self.burst > 0:
            return
        good = self.pays
        self.probe_gap = self.probe_every if good else min(2 * self.probe_gap, MAX_PROBE_GAP)
        self.until_probe = self.probe_gap

    def calibrated(self, cost: Cost) -> Cost:
        """``cost`` with its extra over a plain step scaled to what was measured for a
        pass of the recent mean size (``cost`` itself until that is known)."""
        ratio = self.cost_ratio
        if ratio is None or self.drafted < self.warmup:
            return cost
        modelled = cost.of(max(1, round(self.drafts / self.steps))) - 1.0
        if modelled <= 0:
            return cost
        low, high = SCALE_RANGE
        scale = min(high, max(low, (ratio - 1.0) / modelled))
        return Cost(cost.jump * scale, cost.slope * scale, cost.free)
