"""Exact percentiles of values spread over many chunks, holding none of them all at once. Host CPU only.

`np.percentile(values, range(101))` (linear interpolation) reads the sorted values at a few ranks only: two per
percentile (`ranks`). `select` finds the values at those ranks by a radix selection over the chunks: the float32
values as order-keeping 32-bit keys, 8 bits a round, each round counting the chunks' keys under the prefixes
still wanted (at most 2 * 101 prefixes of 256 counts); four reads of the chunks give every wanted key exactly.
`percentiles` then interpolates as numpy does, so the result is `np.percentile`'s, bit for bit, and it does not
depend on how the values were cut into chunks or in which order the chunks come.

A chunk's values are {feature index: '<f4' [values]}, NaN for a missing value (left out), read as a
`ChunkNumbers` (`chunk_numbers`: a worker's summary of its chunk).

Who reads the chunks is a `Counter`: the statistics and every round's counts are sums over the chunks, exact and
order-independent, so a counter may compute them anywhere and add them up in any order. `ChunkCounter` reads the
chunks in this process; the Beam engine's counter (`data.beam_quantiles`) counts on its workers, from each chunk's
`ChunkSummary` (statistics and first round) and per-chunk `chunk_counts` (later rounds).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Protocol, Tuple, Union, runtime_checkable

import numpy as np

from estimator_lib.data.combine import NumericStats

POINTS = np.arange(101)
_DIGIT_BITS = 8
ROUNDS = 32 // _DIGIT_BITS
BINS = 1 << _DIGIT_BITS  # counts per group and round
_SIGN = np.uint32(0x80000000)
_NONE = np.zeros(0, np.uint64)
_BATCH = 1 << 16  # slots counted at once, at least
_BLOCK = 1024  # wanted ranks given their digit at once
FIRST_SHIFT = 32 - _DIGIT_BITS  # the first round's: its keys counted by their first 8 bits, under no prefix


@dataclasses.dataclass(frozen=True)
class ChunkNumbers:
    """One chunk's training values as the selection reads them (`chunk_numbers`; a worker stores it).

    Attributes:
      features: the numeric feature indices, ascending. counts: present values of each. stats: the exact
        statistics of each one's present values (float64 of the float32 values). keys: uint32 [sum(counts)],
        the present values' `order_keys`, feature after feature.
    """

    features: Tuple[int, ...]
    counts: Tuple[int, ...]
    stats: Tuple[NumericStats, ...]
    keys: np.ndarray


Chunks = Callable[[], Iterator[ChunkNumbers]]  # a fresh pass over the chunks, in any order


@dataclasses.dataclass(frozen=True)
class ChunkSummary:
    """What a chunk adds to `summaries` and to the first round's counts (`chunk_summary`): features x 256 counts
    at most, whatever the chunk's rows, so a launcher can merge every chunk's while the keys stay stored.

    Attributes:
      features, counts, stats: as the chunk's `ChunkNumbers`. first: int64 [len(features), 256], each feature's
        keys counted by their first 8 bits.
    """

    features: Tuple[int, ...]
    counts: Tuple[int, ...]
    stats: Tuple[NumericStats, ...]
    first: np.ndarray


@dataclasses.dataclass(frozen=True)
class Selection:
    """A radix selection under way (`selection`, then one `descend` a round until `done`), one entry per wanted
    rank: its feature (uint64), its rank (int64), the key bits chosen so far (`prefix`, uint64) and its rank
    among the keys under that prefix (`remaining`, int64). Small: 2 x 101 entries per feature at most."""

    feature: np.ndarray
    rank: np.ndarray
    prefix: np.ndarray
    remaining: np.ndarray
    rounds: int = 0

    @property
    def done(self) -> bool:
        return self.rounds == ROUNDS

    @property
    def shift(self) -> int:
        """The lowest bit of this round's 8 (the keys are counted by `(key >> shift) & 0xFF`)."""
        return 32 - _DIGIT_BITS * (self.rounds + 1)

    def groups(self) -> np.ndarray:
        """This round's groups, sorted: (feature << 32) | prefix of each wanted rank, once each."""
        return np.unique(self._group_of())

    def descend(self, counts: np.ndarray) -> "Selection":
        """The next round's selection, given this round's counts (int64 [len(groups()) * 256], `Counter`'s)."""
        prefix, remaining = self.prefix.copy(), self.remaining.copy()
        _descend(prefix, remaining, self._group_of(), self.groups(), counts)
        return dataclasses.replace(self, prefix=prefix, remaining=remaining, rounds=self.rounds + 1)

    def values(self) -> Dict[int, Dict[int, float]]:
        """{feature: {rank: value}} once `done`."""
        values = key_values(self.prefix.astype(np.uint32)).astype(np.float64)
        out: Dict[int, Dict[int, float]] = {int(i): {} for i in np.unique(self.feature).tolist()}
        for i, r, v in zip(self.feature.tolist(), self.rank.tolist(), values.tolist()):
            out[int(i)][r] = v
        return out

    def _group_of(self) -> np.ndarray:
        return (self.feature << np.uint64(32)) | self.prefix


@runtime_checkable
class Counter(Protocol):
    """Who counts the chunks' keys for `profile_numbers`; every count is a sum over the chunks."""

    def summaries(self) -> Dict[int, Tuple[int, NumericStats]]:
        """Per feature, (present values, their exact statistics) over every chunk (as `summaries`)."""

    def select(self, selection: Selection) -> Selection:
        """`selection` carried to its end: each round descends by the chunks' keys under its `groups()`
        counted by their 8 bits from its `shift` (int64 [len(groups) * 256])."""


@dataclasses.dataclass(frozen=True)
class ChunkCounter:
    """`Counter` in this process: one pass over `chunks` per call and per round."""

    chunks: Chunks

    def summaries(self) -> Dict[int, Tuple[int, NumericStats]]:
        return summaries(self.chunks())

    def select(self, selection: Selection) -> Selection:
        while not selection.done:
            selection = selection.descend(_counted(self.chunks(), selection.groups(), selection.shift))
        return selection


Numbers = Union[Chunks, Counter]  # what `profile_numbers` counts: chunks (in this process), or a counter


def ranks(n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(previous rank, next rank, weight) per percentile 0..100 of `n` sorted values, as `np.percentile`'s linear
    method computes them (a rank numpy sets to -1, the last value, given as n - 1)."""
    virtual = (n - 1) * np.true_divide(POINTS, 100)
    previous = np.floor(virtual)
    following = previous + 1
    above = virtual >= n - 1
    previous[above] = -1
    following[above] = -1
    previous, following = previous.astype(np.intp), following.astype(np.intp)
    gamma = virtual - previous
    return np.where(previous < 0, n - 1, previous), np.where(following < 0, n - 1, following), gamma


def percentiles(n: int, value_at: Dict[int, float]) -> List[float]:
    """The 0th..100th percentiles of `n` values from the values at `ranks(n)` ({rank: value}), as numpy's
    `_lerp` interpolates (the same float64 operations in the same order)."""
    previous, following, gamma = ranks(n)
    a = np.array([value_at[int(r)] for r in previous], dtype=np.float64)
    b = np.array([value_at[int(r)] for r in following], dtype=np.float64)
    with np.errstate(invalid="ignore"):  # infinite values give NaN, as in numpy
        diff = np.subtract(b, a)
        out = np.asanyarray(np.add(a, diff * gamma))
        np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe", dtype=type(out.dtype))
    return [float(v) for v in out]


def order_keys(values: np.ndarray) -> np.ndarray:
    """uint32 keys that sort as the float32 values do (-0.0 taken as 0.0: numpy's sort does not tell them apart)."""
    values = np.asarray(values, dtype=np.float32) + np.float32(0.0)  # -0.0 + 0.0 is 0.0
    bits = values.view(np.uint32)
    return np.where(bits & _SIGN, ~bits, bits | _SIGN)


def key_values(keys: np.ndarray) -> np.ndarray:
    """The float32 values of `order_keys`' keys."""
    keys = np.asarray(keys, dtype=np.uint32)
    return np.where(keys & _SIGN, keys & ~_SIGN, ~keys).view(np.float32)


def present(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    return values[~np.isnan(values)]


def chunk_numbers(values: Dict[int, np.ndarray]) -> ChunkNumbers:
    """A chunk's `ChunkNumbers` from its training values ({feature index: '<f4' [rows]}, NaN where missing)."""
    features = tuple(sorted(values))
    found = [present(values[i]) for i in features]
    keys = np.concatenate([order_keys(v) for v in found]) if found else np.zeros(0, np.uint32)
    stats = tuple(NumericStats.of(v.astype(np.float64)) for v in found)
    return ChunkNumbers(features, tuple(len(v) for v in found), stats, keys)


def chunk_summary(chunk: ChunkNumbers) -> ChunkSummary:
    """A chunk's `ChunkSummary` (its statistics, its keys counted by their first 8 bits per feature)."""
    width = 1 << _DIGIT_BITS
    position = np.repeat(np.arange(len(chunk.features), dtype=np.int64), chunk.counts)
    slot = position * width + (chunk.keys >> np.uint32(FIRST_SHIFT)).astype(np.int64)
    first = np.bincount(slot, minlength=len(chunk.features) * width).reshape(len(chunk.features), width)
    return ChunkSummary(chunk.features, chunk.counts, chunk.stats, first)


def first_counts(chunks: Iterable[ChunkSummary], into: Optional[Dict[int, np.ndarray]] = None) -> Dict[int, np.ndarray]:
    """Per feature, its keys over every chunk counted by their first 8 bits, int64 [256] (added to `into`'s)."""
    out: Dict[int, np.ndarray] = dict(into or {})
    for chunk in chunks:
        for index, counts in zip(chunk.features, chunk.first):
            out[index] = out[index] + counts if index in out else counts.astype(np.int64)
    return out


def first_round(first: Dict[int, np.ndarray], groups: np.ndarray) -> np.ndarray:
    """The first round's counts (shift `FIRST_SHIFT`) from `first_counts`: every group is a feature with no
    prefix yet."""
    if (np.asarray(groups, np.uint64) & np.uint64(0xFFFFFFFF)).any():
        raise ValueError(f"the first round's groups are features without a prefix; got {groups[:4].tolist()}...")
    empty = np.zeros(1 << _DIGIT_BITS, np.int64)
    parts = [first.get(int(g) >> 32, empty) for g in groups.tolist()]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


def chunk_counts(chunk: ChunkNumbers, groups: np.ndarray, shift: int) -> Tuple[np.ndarray, np.ndarray]:
    """One chunk's share of a round's counts under `groups` (`Counter.select`), sparse: (slots, their counts),
    int64 [distinct slots] each, at most the chunk's keys and the counts' length."""
    slots = _slots(chunk, groups, shift)
    counted = np.bincount(slots, minlength=len(groups) << _DIGIT_BITS) if len(slots) else np.zeros(0, np.int64)
    at = np.flatnonzero(counted)
    return at, counted[at]


def summaries(
    chunks: Iterable[ChunkNumbers | ChunkSummary], into: Optional[Dict[int, Tuple[int, NumericStats]]] = None
) -> Dict[int, Tuple[int, NumericStats]]:
    """Per feature, (present values, their exact statistics) over every chunk (merged into `into`'s)."""
    out: Dict[int, Tuple[int, NumericStats]] = dict(into or {})
    for chunk in chunks:
        for index, n, stats in zip(chunk.features, chunk.counts, chunk.stats):
            count, merged = out.get(index, (0, NumericStats()))
            out[index] = (count + n, merged.merge(stats))
    return out


def selection(wanted: Dict[int, np.ndarray]) -> Selection:
    """The `Selection` of the `wanted` ranks ({feature: int ranks}) before its first round."""
    features = sorted(wanted)
    feature = np.concatenate([np.full(len(wanted[i]), i, np.uint64) for i in features]) if features else _NONE
    rank = np.concatenate([np.asarray(wanted[i], np.int64) for i in features]) if features else _NONE.astype(np.int64)
    return Selection(feature, rank, np.zeros(len(rank), np.uint64), rank.copy())


def select(counter: Counter, wanted: Dict[int, np.ndarray]) -> Dict[int, Dict[int, float]]:
    """{feature: {rank: value}}: the values at the `wanted` ranks ({feature: int ranks}) of the sorted present
    values of every chunk, by four rounds of 8-bit radix selection (`counter.select`; each chunk's features
    counted at once, a group being a feature index and a prefix of the key)."""
    return counter.select(selection(wanted)).values()


def _counted(chunks: Iterator[ChunkNumbers], groups: np.ndarray, shift: int) -> np.ndarray:
    """Counts of every chunk's keys under each group of `groups` by their next 8 bits, [len(groups) * 256]. The
    chunks' slots are counted a batch at a time, each batch an eighth of the counts' length or more (bounded by
    the groups, not the rows), so the counting costs a few times the keys' at most."""
    size = len(groups) << _DIGIT_BITS
    counts = np.zeros(size, np.int64)
    batch: List[np.ndarray] = []
    held = 0
    for chunk in chunks:
        batch.append(_slots(chunk, groups, shift))
        held += len(batch[-1])
        if held >= max(_BATCH, size // 8):
            counts += np.bincount(np.concatenate(batch), minlength=size)
            batch, held = [], 0
    if batch:
        counts += np.bincount(np.concatenate(batch), minlength=size)
    return counts


def _slots(chunk: ChunkNumbers, groups: np.ndarray, shift: int) -> np.ndarray:
    """The counting slot (group * 256 + next 8 bits) of each of the chunk's keys under a group of `groups`
    (sorted (feature << 32) | prefix)."""
    feature = np.repeat(np.asarray(chunk.features, np.uint64), chunk.counts)
    wide = chunk.keys.astype(np.uint64)
    high = (feature << np.uint64(32)) | (wide >> np.uint64(shift + _DIGIT_BITS))
    digit = ((wide >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.int64)
    at = np.searchsorted(groups, high)
    inside = at < len(groups)
    inside[inside] = groups[at[inside]] == high[inside]
    return (at[inside] << _DIGIT_BITS) + digit[inside]


def _descend(prefix: np.ndarray, remaining: np.ndarray, group_of: np.ndarray, groups: np.ndarray, counts) -> None:
    """One round's choice for each wanted rank: the digit whose keys hold it; its rank among them (a block of
    ranks at a time: each rank's cumulative counts are 2 KB)."""
    table = counts.reshape(len(groups), 1 << _DIGIT_BITS)
    for start in range(0, len(prefix), _BLOCK):
        block = slice(start, start + _BLOCK)
        _choose(prefix[block], remaining[block], table[np.searchsorted(groups, group_of[block])])


def _choose(prefix: np.ndarray, remaining: np.ndarray, counts: np.ndarray) -> None:
    cumulative = np.cumsum(counts, axis=1)
    digit = np.count_nonzero(cumulative <= remaining[:, None], axis=1)
    if (digit == 1 << _DIGIT_BITS).any():
        k = int(np.argmax(digit == 1 << _DIGIT_BITS))
        raise AssertionError(f"rank {remaining[k]} is beyond the {int(cumulative[k, -1])} values counted")
    below = np.where(digit > 0, cumulative[np.arange(len(digit)), np.maximum(digit - 1, 0)], 0)
    remaining -= below
    prefix[:] = (prefix << np.uint64(_DIGIT_BITS)) | digit.astype(np.uint64)


def profile_numbers(numbers: Numbers) -> Dict[int, Tuple[int, NumericStats, List[float]]]:
    """Per feature: (present values, the exact statistics of their float64 values, their 0th..100th percentiles
    as `np.percentile` gives them; [] without values), from a `Counter`'s summaries and four counts (`Chunks`:
    five passes over them in this process, one chunk at a time)."""
    counter = numbers if isinstance(numbers, Counter) else ChunkCounter(numbers)
    found = counter.summaries()
    wanted = {i: np.unique(np.concatenate(ranks(n)[:2])) for i, (n, _) in found.items() if n}
    values = select(counter, wanted)
    return {i: (n, stats, percentiles(n, values[i]) if n else []) for i, (n, stats) in found.items()}
