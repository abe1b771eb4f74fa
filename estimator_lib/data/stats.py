"""After pass 2: merge the chunks' partial statistics and build the final schema.

The numeric statistics are exact and order-independent (`combine.NumericStats`): any split of the rows into
chunks, merged in any order, gives the same bits. Counts and vocabulary counts are sums, so they are too, up to
`Totals.max_categories` distinct values of a column; beyond that the counter keeps its most frequent half as
chunks arrive (`_bounded`), which depends on the merge order.

Everything here comes from the training split's good rows only: numeric mean/std/min/max and missing counts,
categorical vocabularies (most frequent first, ties by text, capped at `max_vocabulary_size`), regression label
statistics. A vocabulary the cap cut is recorded (`vocabulary_caps`, `cap_note`): the column, its distinct values,
the values kept and the training rows whose value is left out (they share the out-of-vocabulary id).

Continuing a reference schema (`Decisions.reference`), vocabularies are append-only: the reference's values
keep their ids and values it lacks follow them (most frequent first, up to `max_vocabulary_size` in all); the
reference's means and standard deviations (numerics and a regression label) are kept unless
`refit_normalization`, so a warm-started model meets inputs scaled as in its training.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Any, Dict, List, Optional, Tuple

from estimator_lib.config import PrepareConfig
from estimator_lib.data import numbers
from estimator_lib.data.combine import NumericStats
from estimator_lib.data.common import SPLITS, DataError
from estimator_lib.data.encode import ChunkResult
from estimator_lib.data.output import UNLABELLED
from estimator_lib.data.plan import Decisions, is_numeric
from estimator_lib.data.profile import ColumnCounts
from estimator_lib.schema import CLASSIFICATION, NUMERIC, REGRESSION, FeatureSpec, LabelSpec, Schema

SHOWN_LINES = 10  # unlabelled rows' lines listed per input file


@dataclasses.dataclass
class Totals:
    """Merged pass-2 results over the whole input."""

    num_features: int
    max_categories: int
    rows: int = 0
    bad: int = 0
    counts: List[int] = dataclasses.field(default_factory=lambda: [0] * len(SPLITS))
    missing: List[List[int]] = dataclasses.field(default_factory=list)
    numeric: Dict[int, NumericStats] = dataclasses.field(default_factory=dict)
    categories: Dict[int, collections.Counter] = dataclasses.field(default_factory=dict)
    class_counts: List[collections.Counter] = dataclasses.field(default_factory=list)
    label_moments: NumericStats = dataclasses.field(default_factory=NumericStats)
    labelled: int = 0
    unlabelled: int = 0  # readable rows whose label is missing (set aside)
    # Per input file, the lines of its first `SHOWN_LINES` unlabelled rows.
    unlabelled_lines: Dict[str, List[int]] = dataclasses.field(default_factory=dict)
    # Per categorical feature, the most distinct values its counter held before `_bounded` halved it: a floor
    # of the column's distinct values (absent while the counter holds every value seen, an exact count).
    distinct_floor: Dict[int, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.missing = [[0] * self.num_features for _ in SPLITS]
        self.class_counts = [collections.Counter() for _ in SPLITS]

    def add(self, part: ChunkResult) -> None:
        self.rows += part.rows
        self.bad += len(part.bad)
        self.labelled += part.labelled
        self.unlabelled += len(part.unlabelled)
        for row in part.unlabelled:
            shown = self.unlabelled_lines.setdefault(row["file"], [])
            if len(shown) < SHOWN_LINES:
                shown.append(row["line"])
        for s, written in enumerate(part.split_counts()):
            self.counts[s] += written
            self.missing[s] = [a + b for a, b in zip(self.missing[s], part.missing[s])]
            self.class_counts[s].update(part.class_counts[s])
        for index, moments in part.numeric.items():
            self.numeric[index] = self.numeric.get(index, NumericStats()).merge(moments)
        for index, counter in part.categories.items():
            merged = self.categories.get(index, collections.Counter()) + counter
            if len(merged) > self.max_categories:
                self.distinct_floor[index] = max(self.distinct_floor.get(index, 0), len(merged))
            self.categories[index] = _bounded(merged, self.max_categories)
        self.label_moments = self.label_moments.merge(part.label_moments)


def _bounded(counter: collections.Counter, limit: int) -> collections.Counter:
    """Keeps memory flat for very high-cardinality columns: beyond `limit` values, the rarest half is dropped
    (the most frequent values, which make the vocabulary, survive)."""
    if len(counter) <= limit:
        return counter
    return collections.Counter(dict(_ranked(counter)[: limit // 2]))


def _ranked(counter: collections.Counter) -> List[Tuple[str, int]]:
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))


def build_schema(decisions: Decisions, totals: Totals, config: "PrepareConfig") -> Schema:
    features = tuple(_feature(f, i, decisions, totals, config) for i, f in enumerate(decisions.features))
    return Schema(features, _label(decisions, totals, config), config.key_column)


def _feature(f: FeatureSpec, index: int, decisions: Decisions, totals: Totals, config: "PrepareConfig") -> FeatureSpec:
    missing = totals.missing[0][index]
    if f.kind == NUMERIC:
        fitted = _numeric(f, totals.numeric.get(index, NumericStats()), missing)
        if decisions.reference is None or config.refit_normalization:
            return fitted
        return dataclasses.replace(fitted, mean=f.mean, std=f.std)
    ranked = tuple(v for v, _ in _ranked(totals.categories.get(index, collections.Counter())))
    if decisions.reference is not None:
        vocabulary = append_only(f.vocabulary, ranked, config.max_vocabulary_size)
    elif _given_vocabulary(f, decisions):
        vocabulary = f.vocabulary
    else:
        vocabulary = ranked[: config.max_vocabulary_size]
    return dataclasses.replace(f, vocabulary=vocabulary, missing_count=missing)


def _given_vocabulary(f: FeatureSpec, decisions: Decisions) -> bool:
    """Whether a supplied schema gives `f`'s vocabulary: kept as it is, never cut by `max_vocabulary_size`."""
    return decisions.reference is None and decisions.supplied is not None and bool(f.vocabulary)


def _numeric(f: FeatureSpec, m: NumericStats, missing: int) -> FeatureSpec:
    if m.count == 0:
        return dataclasses.replace(f, mean=0.0, std=1.0, min=0.0, max=0.0, missing_count=missing)
    std = m.std if m.std > 0 else 1.0  # a constant column: std 1 keeps normalisation finite
    return dataclasses.replace(f, mean=m.mean, std=std, min=m.min, max=m.max, missing_count=missing)


def append_only(known: Tuple[str, ...], ranked: Tuple[str, ...], limit: int) -> Tuple[str, ...]:
    """`known` in its order (ids never move), then the values of `ranked` it lacks, up to `limit` values in all."""
    have = set(known)
    added = tuple(v for v in ranked if v not in have)
    return tuple(known) + added[: max(0, limit - len(known))]


def _label(decisions: Decisions, totals: Totals, config: "PrepareConfig") -> LabelSpec:
    if decisions.task == CLASSIFICATION:
        return LabelSpec(config.label, CLASSIFICATION, classes=decisions.classes)
    m = totals.label_moments
    reference = decisions.reference
    if reference is not None and not config.refit_normalization and m.count > 0:
        old = reference.label
        return LabelSpec(config.label, REGRESSION, mean=old.mean, std=old.std, min=m.min, max=m.max)
    if m.count == 0:
        raise DataError(f"no training row has a usable value in label column {config.label!r}")
    if m.std == 0:
        raise DataError(
            f"label column {config.label!r} has the same value {m.min!r} in all {m.count} training rows; regression "
            "needs a label that varies"
        )
    return LabelSpec(config.label, REGRESSION, mean=m.mean, std=m.std, min=m.min, max=m.max)


def notes(schema: Schema, totals: Totals, config: "PrepareConfig") -> List[str]:
    """Facts a user should see in the manifest: rows without a label, constant or all-missing columns, classes
    without rows, and silent type changes: a categorical column of numbers with thousands separators, values that
    differ only in case (`_separator_note`, `_case_note`)."""
    out = [unlabelled_note(totals)] if totals.unlabelled else []
    for i, f in enumerate(schema.features):
        m = totals.numeric.get(i)
        if f.kind == NUMERIC and (m is None or m.count == 0):
            out.append(f"column {f.name!r} has no value in the training split (mean 0, std 1 used)")
        elif f.kind == NUMERIC and m.std == 0:
            out.append(f"column {f.name!r} is constant ({m.min!r}) in the training split (std 1 used)")
        elif f.kind != NUMERIC:
            counter = totals.categories.get(i, collections.Counter())
            out += _separator_note(f.name, counter, config) + _case_note(f"column {f.name!r}", "categories", counter)
    for c, name in enumerate(schema.label.classes):
        if totals.class_counts[0][c] == 0:
            out.append(f"label class {name!r} has no good training row")
    classes = {name: totals.class_counts[0][c] for c, name in enumerate(schema.label.classes)}
    return out + _case_note(f"label {schema.label.name!r}", "classes", classes)


_SEPARATED = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d*)?")  # "3,750", "-1,234.5"


def _separator_note(name: str, counter: collections.Counter, config: "PrepareConfig") -> List[str]:
    """The note for a categorical column that would be numeric (`plan.is_numeric`) without thousands separators."""
    separated = [v for v, _ in _ranked(counter) if _SEPARATED.fullmatch(v)]
    numeric = sum(n for v, n in counter.items() if numbers.read(v) is not None or _SEPARATED.fullmatch(v))
    if not separated or not is_numeric(ColumnCounts(sum(counter.values()), numeric), config):
        return []
    return [
        f"column {name!r} reads as categorical with {len(counter)} values because its numbers are written with "
        f"thousands separators (such as {separated[0]!r}), which are not read as numbers; write them without "
        f"separators ({separated[0].replace(',', '')!r}) to make it numeric"
    ]


def _case_note(what: str, kind: str, counts: Dict[str, int]) -> List[str]:
    """The note for values that differ only in case, with their training rows (`read.clean` strips white space)."""
    groups: Dict[str, List[str]] = collections.defaultdict(list)
    for value in sorted(counts):
        groups[value.casefold()].append(value)
    found = [g for g in groups.values() if len(g) > 1]
    if not found:
        return []
    listed = "; ".join(", ".join(f"{v!r} ({counts[v]} training rows)" for v in g) for g in found[:5])
    more = f"; {len(found) - 5} more such groups" if len(found) > 5 else ""
    return [f"{what}: values that differ only in case are separate {kind}: {listed}{more}"]


def unlabelled_note(totals: Totals) -> str:
    """Says how many rows had no label, where the first are, and where they wait to be scored."""
    places = "; ".join(
        f"{name} line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
        for name, lines in totals.unlabelled_lines.items()
    )
    more = ", ..." if sum(map(len, totals.unlabelled_lines.values())) < totals.unlabelled else ""
    return (
        f"{totals.unlabelled} row(s) have no label ({places}{more}): set aside, neither trained on nor evaluated; "
        f"{UNLABELLED} in the prepared dataset holds them, to score with --predict-data (docs/prepare.md)"
    )


def vocabulary_caps(
    decisions: Decisions, schema: Schema, totals: Totals, config: "PrepareConfig"
) -> List[Dict[str, Any]]:
    """The categorical columns whose vocabulary `max_vocabulary_size` cut, each as {column, distinct (values in
    the training split; a floor when `distinct_exact` is false), kept (the vocabulary's size), max_vocabulary_size,
    rows (training rows), rows_outside (training rows whose value is not kept: they share the out-of-vocabulary
    id, as a missing value does), share_outside (rows_outside / rows)}.

    Beyond `Totals.max_categories` distinct values the rarest half of a counter is dropped as it is merged
    (`_bounded`): `distinct` is then a floor and `rows_outside` an estimate (a kept value's rows counted before it
    was dropped once are lost), and `distinct_exact` is false."""
    out = []
    for index, (decided, f) in enumerate(zip(decisions.features, schema.features)):
        if f.kind == NUMERIC or _given_vocabulary(decided, decisions):
            continue
        counter = totals.categories.get(index, collections.Counter())
        kept = set(f.vocabulary)
        if all(value in kept for value in counter) and index not in totals.distinct_floor:
            continue
        rows = totals.counts[0]
        outside = rows - totals.missing[0][index] - sum(n for value, n in counter.items() if value in kept)
        floor: Optional[int] = totals.distinct_floor.get(index)
        out.append(
            {
                "column": f.name,
                "distinct": max(len(counter), floor or 0),
                "distinct_exact": floor is None,
                "kept": len(f.vocabulary),
                "max_vocabulary_size": config.max_vocabulary_size,
                "rows": rows,
                "rows_outside": outside,
                "share_outside": round(outside / max(rows, 1), 6),
            }
        )
    return out


def cap_note(cap: Dict[str, Any]) -> str:
    """A `vocabulary_caps` entry as the warning the manifest's notes, the console and the report show."""
    exact = cap["distinct_exact"]
    distinct, about = (f"{cap['distinct']}", "") if exact else (f"at least {cap['distinct']}", "about ")
    return (
        f"column {cap['column']!r}: vocabulary capped: {distinct} distinct values in the training split, the "
        f"{cap['kept']} most frequent kept (prepare.max_vocabulary_size={cap['max_vocabulary_size']}); {about}"
        f"{cap['rows_outside']} of {cap['rows']} training rows ({cap['share_outside']:.1%}) hold a value left out, "
        "which the model sees as out-of-vocabulary, like a missing value. Raise prepare.max_vocabulary_size to "
        "keep more (docs/prepare.md)"
    )


def summary(schema: Schema, totals: Totals) -> Dict[str, Any]:
    """Per-split counts, per-feature missing counts and class counts, for the manifest."""
    names = [f.name for f in schema.features]
    out: Dict[str, Any] = {
        "missing": {s: dict(zip(names, totals.missing[i])) for i, s in enumerate(SPLITS)},
    }
    if schema.label.task == CLASSIFICATION:
        out["class_counts"] = {
            s: {c: totals.class_counts[i][k] for k, c in enumerate(schema.label.classes)} for i, s in enumerate(SPLITS)
        }
    return out
