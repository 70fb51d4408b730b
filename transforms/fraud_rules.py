"""The fraud rules over one user's purchases, in plain Python: what ``FraudDetector`` judges with.

Time semantics: every span here is event time. A purchase is judged on arrival against the user's purchases
that arrived before it (arrival order is the stream's, ``keyed_state.arrival_key``):

- ``large_amount``: amount ≥ 10x the mean of the earlier arrivals with event time in ``[t - 1 h, t]``;
  needs at least one, and a positive sum (a mean of zero or less makes every amount "large").
- ``burst``: with it, 3 or more purchases fall within 60 s of event time (a span of exactly 60 s counts),
  and none of the purchases it makes them with was in such a burst before: one alert per episode.

A third rule needs none of this: ``amount_limit``, a purchase of at least ``LAKEHOUSE_FRAUD_AMOUNT_LIMIT``,
judged alone in the micro-batch that carries it to silver (``transforms.limit_alerts``).

The detector keeps a user's purchases by minute of event time. A batch reads whole only the minutes its
purchases can see in detail (``minutes_to_read``); every other minute of the hour takes part as one
``MinuteTotal``, which gives the same verdicts (``PurchaseHistory`` says why).
"""

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import ROUND_HALF_EVEN, Decimal

#: large_amount compares a purchase with the mean of the user's purchases in the hour of event time up to it.
MEAN_HORIZON = timedelta(hours=1)
LARGE_FACTOR = 10
#: burst: this many purchases within this span of event time (both ends included).
BURST_PURCHASES = 3
BURST_SPAN = timedelta(seconds=60)
#: The detector keeps purchases in minutes of event time, ``[m, m + MINUTE)``.
MINUTE = timedelta(minutes=1)

LARGE_AMOUNT, BURST = "large_amount", "burst"
#: The rule without state (``transforms.limit_alerts``).
AMOUNT_LIMIT = "amount_limit"


def span_micros(span: timedelta) -> int:
    """A span of event time in whole microseconds."""
    return span // timedelta(microseconds=1)


_MINUTE, _HOUR, _BURST = span_micros(MINUTE), span_micros(MEAN_HORIZON), span_micros(BURST_SPAN)
#: A burst's triples and the triples touching them lie within two spans of the purchase judged.
_BURST_REACH = 2 * _BURST


@dataclass(frozen=True)
class Purchase:
    """One purchase as the fraud state keeps it: event time in µs, amount in cents (exact)."""

    event_id: str
    at: int
    cents: int


@dataclass(frozen=True)
class MinuteTotal:
    """The kept purchases of the minute of event time starting at ``start`` (µs): how many, their cents."""

    start: int
    count: int
    cents: int


@dataclass(frozen=True)
class Finding:
    """A rule a purchase broke, with the purchases that show it (trigger included, by event time)."""

    rule: str
    evidence: tuple[str, ...]
    running_mean: Decimal | None = None


def minute_of(at: int) -> int:
    """The start (µs) of the minute of event time holding ``at``."""
    return at - at % _MINUTE


def minutes_to_read(coming: Iterable[Purchase], held: Iterable[int]) -> set[int]:
    """The held minutes a batch of ``coming`` purchases must read whole; the rest stand as ``MinuteTotal``.

    For each purchase at ``t``: the minutes within ``2 x BURST_SPAN`` of ``t`` (its bursts, and the bursts
    touching them) and the minute holding ``t - 1 h`` (the hour's open edge). Every other minute lies wholly
    inside ``[t - 1 h, t]`` or wholly outside it, and more than ``2 x BURST_SPAN`` from ``t``.
    """
    held = set(held)
    wanted: set[int] = set()
    for purchase in coming:
        wanted.add(minute_of(purchase.at - _HOUR))
        wanted.update(range(minute_of(purchase.at - _BURST_REACH), purchase.at + _BURST_REACH + 1, _MINUTE))
    return wanted & held


#: How far ``PurchaseHistory`` scans the arrival flags for a neighbour before asking the Fenwick tree.
_SCAN = 64


class PurchaseHistory:
    """One user's purchases for one batch, sorted once by event time (then event id): those kept in state,
    which have all arrived, whole minutes of them as ``MinuteTotal``s, and the batch's own, which arrive one
    at a time (``arrive``) in arrival order.

    Fenwick trees over that order count the arrived entries, and count and sum the arrived purchases (a
    minute total weighs its count and cents), so the hour before a purchase and its neighbours in event time
    are O(log n) look-ups: a hot user costs its entries times log n per batch, not their square. ``steps``
    counts the trees' steps (the cost, for the tests).

    A minute total sits at its minute's start. It gives the verdicts its purchases would, as long as it lies
    more than ``2 x BURST_SPAN`` from every coming purchase and wholly inside or outside each one's hour
    (``minutes_to_read`` picks the minutes that do not): it weighs in the mean exactly when its purchases
    would; a burst's triples and the triples touching them lie within ``2 x BURST_SPAN`` of the purchase, so
    they are the same purchases, still consecutive, and a triple with a total in it spans more than 60 s.
    ``expand`` gives a total's purchases back when a ``large_amount`` alert lists its evidence.
    """

    def __init__(
        self,
        kept: Sequence[Purchase] = (),
        coming: Sequence[Purchase] = (),
        totals: Sequence[MinuteTotal] = (),
        expand: Callable[[int], Sequence[Purchase]] | None = None,
    ) -> None:
        stand_ins = [Purchase("", total.start, total.cents) for total in totals]
        everything = [*kept, *stand_ins, *coming]
        weights = [1] * len(kept) + [total.count for total in totals] + [1] * len(coming)
        order = sorted(range(len(everything)), key=lambda i: (everything[i].at, everything[i].event_id))
        self._order = [everything[i] for i in order]
        self._times = [p.at for p in self._order]
        rank = [0] * len(everything)
        for r, i in enumerate(order):
            rank[i] = r
        held = len(kept) + len(totals)
        self._total_ranks = set(rank[len(kept) : held])
        self._expand = expand
        self._coming = rank[held:]
        size = self._size = len(everything)
        self._arrived = bytearray(size)
        self._entries = [0] * (size + 1)
        self._count = [0] * (size + 1)
        self._cents = [0] * (size + 1)
        for i in range(held):
            r = rank[i]
            self._arrived[r] = 1
            self._entries[r + 1] = 1
            self._count[r + 1] = weights[i]
            self._cents[r + 1] = everything[i].cents
        for tree in (self._entries, self._count, self._cents):  # each tree built in one pass
            for i in range(1, size + 1):
                j = i + (i & -i)
                if j <= size:
                    tree[j] += tree[i]
        self._top = 1 << (size.bit_length() - 1) if size else 0
        self.arrived = held
        self.steps = 0

    @property
    def earliest(self) -> int | None:
        """The earliest event time of the user's purchases and minutes, kept or coming (µs), or None."""
        return self._times[0] if self._times else None

    def arrive(self, n: int) -> list[Finding]:
        """Judge the batch's ``n``-th purchase against those arrived before it, then count it as arrived."""
        r = self._coming[n]
        purchase = self._order[r]
        findings = []
        large = self._large_amount(r, purchase)
        if large is not None:
            findings.append(large)
        burst = self._burst(r)
        if burst is not None:
            findings.append(Finding(BURST, burst))
        self._mark(r, purchase.cents)
        return findings

    def _large_amount(self, r: int, purchase: Purchase) -> Finding | None:
        low = bisect_left(self._times, purchase.at - _HOUR)
        high = bisect_right(self._times, purchase.at)
        count_high, total_high = self._prefix(high)
        count_low, total_low = self._prefix(low)
        count, total = count_high - count_low, total_high - total_low
        if not count or total <= 0 or purchase.cents * count < LARGE_FACTOR * total:
            return None
        mean = (Decimal(total) / count).scaleb(-2).quantize(Decimal("0.0001"), ROUND_HALF_EVEN)
        # The evidence is output: listing it costs its length (and reading its minutes), once per alert.
        evidence: list[str] = []
        for i in range(low, high):
            entry = self._order[i]
            if i in self._total_ranks and self._expand is not None:
                evidence.extend(p.event_id for p in sorted(self._expand(entry.at), key=lambda p: (p.at, p.event_id)))
            elif self._arrived[i] or i == r:
                evidence.append(entry.event_id)
        return Finding(LARGE_AMOUNT, tuple(evidence), mean)

    def _burst(self, r: int) -> tuple[str, ...] | None:
        """The evidence of a burst episode ``r`` starts, or None (no burst, or one it only continues).

        In the event-time order of the arrived purchases and ``r``, a burst is three consecutive purchases
        within ``BURST_SPAN`` (any 60 s holding three holds three consecutive ones). ``r`` starts an episode
        when it is in such a triple and none of the purchases of its triples was in a triple of the arrived
        ones already (their bursts touch: the same episode, alerted when it started).
        """
        back, ahead = self._walk(r, -1, 2), self._walk(r, 1, 2)
        around = [*reversed(back), r, *ahead]
        at = len(back)
        triples = [around[s : s + 3] for s in range(at - 2, at + 1) if s >= 0 and s + 2 < len(around)]
        triples = [t for t in triples if self._tight(t[0], t[2])]
        if not triples:
            return None
        members = {i for t in triples for i in t if i != r}
        further_back = self._walk(back[-1], -1, 2) if len(back) == 2 else []
        further_ahead = self._walk(ahead[-1], 1, 2) if len(ahead) == 2 else []
        arrived = [*reversed(back + further_back), *ahead, *further_ahead]
        for q, i in enumerate(arrived):
            if i in members:
                for s in range(max(0, q - 2), min(q, len(arrived) - 3) + 1):
                    if self._tight(arrived[s], arrived[s + 2]):
                        return None
        return tuple(self._order[i].event_id for i in triples[0])

    def _tight(self, first: int, third: int) -> bool:
        return self._times[third] - self._times[first] <= _BURST

    def _walk(self, r: int, direction: int, wanted: int) -> list[int]:
        """Up to ``wanted`` arrived entries next to rank ``r`` in event time, nearest first."""
        found: list[int] = []
        while len(found) < wanted:
            # Arrivals come nearly in event-time order, so a neighbour is almost always a few flags away;
            # the tree bounds the rest (a batch arriving backwards in time) to O(log n).
            if direction < 0:
                i = self._arrived.rfind(1, max(0, r - _SCAN), r)
                if i < 0 and r > _SCAN:
                    before = self._entries_before(r)
                    i = self._kth(before - 1) if before else -1
            else:
                i = self._arrived.find(1, r + 1, r + 1 + _SCAN)
                if i < 0 and r + 1 + _SCAN < self._size:
                    upto = self._entries_before(r + 1)
                    i = self._kth(upto) if upto < self.arrived else -1
            if i < 0:
                break
            found.append(i)
            r = i
        return found

    def _prefix(self, r: int) -> tuple[int, int]:
        """Arrived purchases among the first ``r`` ranks: how many, and their cents."""
        count = cents = steps = 0
        while r > 0:
            count += self._count[r]
            cents += self._cents[r]
            r &= r - 1
            steps += 1
        self.steps += steps
        return count, cents

    def _entries_before(self, r: int) -> int:
        """Arrived entries (purchases and minute totals) among the first ``r`` ranks."""
        entries = steps = 0
        while r > 0:
            entries += self._entries[r]
            r &= r - 1
            steps += 1
        self.steps += steps
        return entries

    def _kth(self, k: int) -> int:
        """The rank of the ``k``-th arrived entry (from 0) in event-time order."""
        position, step, steps = 0, self._top, 0
        while step:
            following = position + step
            if following <= self._size and self._entries[following] <= k:
                position = following
                k -= self._entries[following]
            step >>= 1
            steps += 1
        self.steps += steps
        return position

    def _mark(self, r: int, cents: int) -> None:
        self._arrived[r] = 1
        self.arrived += 1
        i, steps = r + 1, 0
        while i <= self._size:
            self._entries[i] += 1
            self._count[i] += 1
            self._cents[i] += cents
            i += i & -i
            steps += 1
        self.steps += steps


def judge_purchase(purchase: Purchase, earlier: Sequence[Purchase]) -> list[Finding]:
    """The rules ``purchase`` breaks, judged against the user's purchases that arrived before it."""
    return PurchaseHistory(earlier, [purchase]).arrive(0)
