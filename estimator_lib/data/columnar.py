"""Column-at-a-time pieces of pass 2 for CSV chunks: numbers converted and checked per column, Example bytes
assembled from per-column pieces.

A numeric map entry is a constant prefix (its key) and 4 float32 bytes, so a run of numeric features adjacent
in key order is a fixed-layout block that numpy fills for all rows of a chunk at once; a categorical entry
depends only on its text, so it is built once per distinct value. Each row's Example is then one join of a
few pieces. Everything here yields the exact bytes of `wire.example` over the same entries; `encode` decides
which rows are safe to assemble this way and sends the others down its precise per-row path.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from estimator_lib.data import wire


def numeric_column(values: Sequence[Optional[str]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(float64 numbers, their float32, present, doubtful) of a cleaned column (None: missing).

    A doubtful row holds text that is not a number, or a number that is not a finite float32; the per-row
    path reports it. Missing and doubtful rows hold NaN."""
    try:
        numbers = np.fromiter(map(float, values), np.float64, len(values))  # one C loop for a clean column
        present, doubtful = np.ones(len(numbers), bool), np.zeros(len(numbers), bool)
    except (TypeError, ValueError):
        numbers, present, doubtful = _one_by_one(values)
    return checked_numbers(numbers, present, doubtful)


def checked_numbers(
    numbers: np.ndarray, present: np.ndarray, doubtful: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`numeric_column`'s result from a column's float64 numbers (NaN where absent), present and doubtful
    rows: a number that is not a finite float32 makes its row doubtful."""
    doubtful = np.zeros(len(numbers), bool) if doubtful is None else doubtful
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = numbers.astype("<f4")
    bad = present & ~np.isfinite(f32)
    numbers[bad] = np.nan
    return numbers, f32, present & ~bad, doubtful | bad


def _one_by_one(values: Sequence[Optional[str]]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    numbers = np.full(len(values), np.nan)
    present, doubtful = np.zeros(len(values), bool), np.zeros(len(values), bool)
    for i, text in enumerate(values):
        if text is None:
            continue
        try:
            numbers[i] = float(text)
            present[i] = True
        except ValueError:
            doubtful[i] = True
    return numbers, present, doubtful


def numeric_block(
    prefixes: Sequence[bytes], values: Sequence[np.ndarray], present: Sequence[np.ndarray]
) -> List[bytes]:
    """Per row, the map entries `prefix + float32 bytes` of adjacent numeric features, those present only.

    Args:
      prefixes: each feature's `wire.float_entry_prefix`, in key order.
      values: each feature's '<f4' values, [rows].
      present: each feature's bool [rows]: False leaves the entry out.
    """
    rows = len(values[0])
    template = np.frombuffer(b"".join(p + b"\x00" * 4 for p in prefixes), np.uint8)
    width = len(template)
    block = np.empty((rows, width), np.uint8)
    block[:] = template
    spans, start = [], 0
    for prefix, column in zip(prefixes, values):
        end = start + len(prefix) + 4
        block[:, end - 4 : end] = column.view(np.uint8).reshape(rows, 4)
        spans.append((start, end))
        start = end
    raw = block.tobytes()
    pieces = [raw[i : i + width] for i in range(0, rows * width, width)]
    gaps = ~np.logical_and.reduce(present)
    for i in np.flatnonzero(gaps).tolist():
        pieces[i] = b"".join(pieces[i][s:e] for (s, e), p in zip(spans, present) if p[i])
    return pieces


def text_entries(key: str, texts: Sequence[Optional[str]]) -> List[bytes]:
    """Per row, the bytes map entry of `key` holding the text (b"" where the text is None)."""
    entries: Dict[Optional[str], bytes] = {
        t: wire.entry(key, wire.bytes_feature(t.encode("utf-8"))) for t in set(texts) if t is not None
    }
    entries[None] = b""
    return list(map(entries.__getitem__, texts))


def key_entries(keys: Sequence[str]) -> List[bytes]:
    """Per row, `wire.key_entry(key)`."""
    encoded = [k.encode("utf-8") for k in keys]
    lengths = list(map(len, encoded))
    prefixes = {n: wire.key_entry_prefix(n) for n in set(lengths)}
    return list(map(bytes.__add__, map(prefixes.__getitem__, lengths), encoded))


def examples(pieces: Sequence[Sequence[bytes]]) -> List[bytes]:
    """Per row, `wire.example` of the row's entries; `pieces` holds one list per group of entries, each with
    one item per row, in key order."""
    bodies = list(map(b"".join, zip(*pieces)))
    lengths = list(map(len, bodies))
    heads = {n: wire.example_head(n) for n in set(lengths)}
    return list(map(bytes.__add__, map(heads.__getitem__, lengths), bodies))
