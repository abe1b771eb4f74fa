"""Between the passes: repeated keys and the rows' places (`places`), found per bucket of key hashes, so no
process needs every row's key at once. Runs on the host CPU (the Beam engine: on its workers).

Pass 1 gives each row its key hash, whether the key is usable, and its line. A row's bucket is the top
`KeyPlan.bits` bits of its hash, so rows with the same key meet in one bucket, and the buckets in order hold the
hashes in order. Each bucket is sorted by (hash, row) alone (`resolve`): that gives its repeated keys (a row's
first row with the same key and its occurrence number, as `plan.find_duplicates` gives them over all rows) and
its part of every split's places table. The places tables are the buckets' parts in bucket order
(`places.write_places`), so the output does not depend on the number of buckets or on who resolved which.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.data import places
from estimator_lib.data.common import EVAL, SPLITS, split_indices
from estimator_lib.data.profile import Profile

# One usable key: its hash, its row (index over all rows), its chunk (index over all chunks, input order), the
# index of its input file and its line there.
ENTRY = np.dtype([("hash", "<u8"), ("row", "<u8"), ("chunk", "<u4"), ("file", "<u4"), ("line", "<u4")])
# Rows per bucket aimed at (`bucket_bits`): a bucket's sort and its places are a few MB.
BUCKET_ROWS = 1 << 18
_MAX_BITS = 16


@dataclasses.dataclass(frozen=True)
class KeyPlan:
    """What finding the repeated keys and the places needs.

    Attributes:
      names: the input files' names, in input order (a key column's duplicate names its first row's file).
      key_column: keys are a key column's values (a repeat is a duplicate, named by its first row's place);
        else rows' content hashes (a repeat is an occurrence, numbered).
      fractions: (eval, test, valid) fractions the splits are cut with; None for scoring (every row in the eval
        slot's places).
      splits: the splits whose places are written.
      bits: the buckets are the top `bits` bits of the hash (2**bits buckets).
    """

    names: Tuple[str, ...]
    key_column: bool
    fractions: Optional[Tuple[float, float, float]]
    splits: Tuple[str, ...]
    bits: int = 0


@dataclasses.dataclass
class Resolved:
    """One bucket's findings: per chunk its rows' repeat facts (`ChunkTask.duplicates` or `.occurrences`),
    and per split its part of the places table (`places.DTYPE`, sorted by hash, then row)."""

    facts: Dict[int, Dict[int, Any]]
    places: Dict[str, np.ndarray]


def bucket_bits(rows: int) -> int:
    """Bits of the hash that pick a bucket, for `rows` rows: about `BUCKET_ROWS` rows per bucket."""
    bits = 0
    while (BUCKET_ROWS << bits) < rows and bits < _MAX_BITS:
        bits += 1
    return bits


def chunk_entries(
    hashes: np.ndarray, valid: np.ndarray, lines: np.ndarray, file_index: int, chunk: int, first_row: int
) -> np.ndarray:
    """`ENTRY` [usable keys of the chunk], in row order, from the chunk's pass-1 arrays (all [rows of the chunk]).

    Args:
      hashes: uint64 key hashes; valid: bool, the row has a usable key; lines: uint32, each row's line.
      file_index: the chunk's input file; chunk: the chunk's index over all chunks; first_row: its first row's
        index over all rows.
    """
    rows = np.flatnonzero(valid)
    out = np.zeros(len(rows), ENTRY)
    out["hash"] = hashes[rows]
    out["row"] = rows + first_row
    out["chunk"] = chunk
    out["file"] = file_index
    out["line"] = lines[rows]
    return out


def buckets(entries: np.ndarray, bits: int) -> Iterator[Tuple[int, np.ndarray]]:
    """(bucket, its entries in their order) for every bucket holding some of `entries`."""
    bucket = (entries["hash"] >> np.uint64(64 - bits)).astype(np.int64) if bits else np.zeros(len(entries), np.int64)
    order = np.argsort(bucket, kind="stable")
    ordered = bucket[order]
    for b in np.unique(ordered).tolist():
        yield b, entries[order[np.searchsorted(ordered, b) : np.searchsorted(ordered, b, side="right")]]


def resolve(entries: np.ndarray, plan: KeyPlan) -> Resolved:
    """The repeat facts and places of one bucket's entries (any order; all the entries of their hashes)."""
    ordered = entries[np.lexsort((entries["row"], entries["hash"]))]
    return Resolved(_repeats(ordered, plan), {s: _places(ordered, plan, s) for s in plan.splits})


def _repeats(ordered: np.ndarray, plan: KeyPlan) -> Dict[int, Dict[int, Any]]:
    """{chunk: {row: its first row's (file name, line), or its occurrence}} of every row whose hash came before."""
    hashes = ordered["hash"]
    starts = np.r_[True, hashes[1:] != hashes[:-1]] if len(hashes) else np.zeros(0, bool)
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(hashes)), 0)) if len(hashes) else starts
    out: Dict[int, Dict[int, Any]] = {}
    for position in np.flatnonzero(~starts).tolist():
        first = int(group_start[position])
        entry = ordered[position]
        if plan.key_column:
            fact: Any = (plan.names[int(ordered["file"][first])], int(ordered["line"][first]))
        else:
            fact = position - first
        out.setdefault(int(entry["chunk"]), {})[int(entry["row"])] = fact
    return out


def _places(ordered: np.ndarray, plan: KeyPlan, split: str) -> np.ndarray:
    mine = ordered
    if plan.fractions is not None:
        mine = ordered[split_indices(ordered["hash"], *plan.fractions) == SPLITS.index(split)]
    table = np.zeros(len(mine), places.DTYPE)
    for name in ("hash", "file", "line"):
        table[name] = mine[name]
    return table


def resolve_all(parts: Sequence[np.ndarray], plan: KeyPlan) -> Resolved:
    """`resolve` of every chunk's entries at once (one bucket: the in-process engine)."""
    return resolve(np.concatenate(parts) if parts else np.zeros(0, ENTRY), plan)


def scoring_plan(names: Sequence[str], key_column: bool, rows: int) -> KeyPlan:
    """Scoring's plan: every usable row's place in the eval slot's table."""
    return KeyPlan(tuple(names), key_column, None, (EVAL,), bucket_bits(rows))


def prepare_plan(names: Sequence[str], key_column: bool, fractions: Tuple[float, float, float], rows: int) -> KeyPlan:
    """prepare's plan: the places of every split it writes (as the shard writers' splits)."""
    written = tuple(s for s, f in zip(SPLITS, (1.0, *fractions)) if f > 0)
    return KeyPlan(tuple(names), key_column, fractions, written, bucket_bits(rows))


def split_facts(facts: Dict[int, Any], key_column: bool) -> Tuple[Dict[int, Any], Dict[int, int]]:
    """A chunk's repeat facts as `ChunkTask`'s (duplicates, occurrences)."""
    return (dict(facts), {}) if key_column else ({}, dict(facts))


def merge_facts(parts: List[Dict[int, Any]]) -> Dict[int, Any]:
    """One chunk's repeat facts from its buckets' parts (their rows are disjoint)."""
    out: Dict[int, Any] = {}
    for part in parts:
        out.update(part)
    return out


def write_places(path: str, parts: Iterator[np.ndarray], count: int) -> None:
    """Writes a places table from its parts in order (`count` entries in all) to a local `path`, the same bytes
    as `places.write_places` of the whole table, holding one part at a time."""
    header = {"descr": np.lib.format.dtype_to_descr(places.DTYPE), "fortran_order": False, "shape": (count,)}
    written = 0
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for part in parts:
            f.write(np.ascontiguousarray(part, places.DTYPE).tobytes())
            written += len(part)
    if written != count:
        raise AssertionError(f"{path}: {written} places written, not the {count} counted")


def in_process(
    profile: Profile, chunk_rows: List[Tuple[int, int]], plan: KeyPlan, staging: str
) -> Dict[int, Dict[int, Any]]:
    """The in-process engine's `Passes.keys`: every chunk's entries from the merged profile's per-row arrays,
    resolved at once; writes the places tables into `staging` and returns the repeat facts by chunk."""
    parts, first_row = [], 0
    for chunk, (file_index, n) in enumerate(chunk_rows):
        arrays = profile.key_hashes[chunk], profile.valid[chunk], profile.lines[chunk]
        parts.append(chunk_entries(*arrays, file_index, chunk, first_row))
        first_row += n
    resolved = resolve_all(parts, plan)
    for split, table in resolved.places.items():
        write_places(os.path.join(staging, places.places_file(split)), iter([table]), len(table))
    return resolved.facts
