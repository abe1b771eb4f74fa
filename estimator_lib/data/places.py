"""Where a prepared row came from: its input file and line, found by its key.

The prepared records carry a row's key, not its place in the input. Pass 1 of preparation knows every row's key
hash, file and line, so prepare writes them for each split it writes into `<split>_places.npy` inside the
prepared dataset (`eval_places.npy`, `train_places.npy`, ...): one entry per row of the split pass 1 could read,
(key hash uint64, file index uint32, line uint32), sorted by hash and, for equal hashes, in input order. A file
index is the position of the file in the manifest's `inputs`; a line is the 1-based line of the file where the
row starts (a CSV header is line 1). `encode_for_scoring` keeps every row in the eval slot and writes all of them
to `eval_places.npy`. `np.save` writes no timestamp, so the same input gives the same bytes (the dataset's
fingerprint covers the files).

A key maps back to its hash as pass 1 computed it: a key column's value is hashed (`common.hash64`); a derived
key "<hash>-<occurrence>" (`common.derived_key`) carries its hash and how many identical rows came before it,
which picks the entry among equal hashes. A key column's duplicate rows are bad rows (never written), so its key
is the first entry of its hash. Rows that turned out bad in pass 2 keep their entries; no written key names them.
"""

from __future__ import annotations

import io
import re
from typing import Optional, Sequence, Tuple

import numpy as np

from estimator_lib import storage
from estimator_lib.data.common import EVAL, SPLITS, hash64, split_indices

PLACES_FILE = "eval_places.npy"  # the eval split's; `places_file` names any split's
DTYPE = np.dtype([("hash", "<u8"), ("file", "<u4"), ("line", "<u4")])
_DERIVED = re.compile(r"([0-9a-f]{16})-(\d+)")


def places_file(split: str) -> str:
    """The file name of a split's places: "eval_places.npy" for "eval"."""
    return f"{split}_places.npy"


def input_places(hashes: np.ndarray, valid: np.ndarray, lines: np.ndarray, file_starts: Sequence[int]) -> np.ndarray:
    """Every readable row's place, `DTYPE` [rows with a usable key], from pass 1's per-row arrays (all [rows]).

    Args:
      hashes: uint64 key (or content) hashes; valid: whether the row has a usable key; lines: each row's line.
      file_starts: the row index of each input file's first row.
    """
    return _table(hashes, lines, file_starts, np.flatnonzero(valid))


def split_places(
    hashes: np.ndarray,
    valid: np.ndarray,
    lines: np.ndarray,
    file_starts: Sequence[int],
    fractions: Tuple[float, float, float],
    split: str = EVAL,
) -> np.ndarray:
    """One split's places, `DTYPE` [rows of the split]: `input_places` of the rows the split cut gives `split`.

    Args:
      hashes, valid, lines, file_starts: as for `input_places`.
      fractions: (eval_fraction, test_fraction, valid_fraction), as the split was cut.
      split: "train", "eval", "test" or "valid".
    """
    rows = np.flatnonzero(valid & (split_indices(hashes, *fractions) == SPLITS.index(split)))
    return _table(hashes, lines, file_starts, rows)


def _table(hashes: np.ndarray, lines: np.ndarray, file_starts: Sequence[int], rows: np.ndarray) -> np.ndarray:
    table = np.zeros(len(rows), DTYPE)
    table["hash"] = hashes[rows]
    table["file"] = np.searchsorted(np.asarray(file_starts), rows, side="right") - 1
    table["line"] = lines[rows]
    return table[np.argsort(table["hash"], kind="stable")]


def write_places(path: str, table: np.ndarray) -> None:
    """Writes a places table (`split_places`) to a local `path` (inside a staging directory)."""
    with open(path, "wb") as f:
        np.save(f, table, allow_pickle=False)


def read_places(output_dir: str, split: str = EVAL) -> Optional[np.ndarray]:
    """A split's places in a prepared dataset (local or gs://); None for a dataset prepared before they were
    recorded (earlier preparations recorded the eval split's alone)."""
    uri = storage.join(output_dir, places_file(split))
    if not storage.exists(uri):
        return None
    table = np.load(io.BytesIO(storage.read_bytes(uri)), allow_pickle=False)
    if table.dtype != DTYPE:
        raise ValueError(f"{uri}: entries of {table.dtype}, expected {DTYPE}; prepare the data again")
    return table


def place_of(table: np.ndarray, key: str, key_column: bool, names: Sequence[str]) -> Optional[Tuple[str, int]]:
    """(input file name, line) of the row with `key`, or None when the table has no entry for it.

    Args:
      table: `read_places`' entries.
      key: the row's key, as the prepared record holds it.
      key_column: whether keys are a key column's values (else derived from the rows' content).
      names: the input files' names, in the manifest's `inputs` order.
    """
    files, lines = places_of(table, [key], key_column)
    return None if files[0] < 0 else (names[int(files[0])], int(lines[0]))


def places_of(table: np.ndarray, keys: Sequence[str], key_column: bool) -> Tuple[np.ndarray, np.ndarray]:
    """Each key's (file index, line), as int64 [n] and uint32 [n]; file index -1 (line 0) for a key without an
    entry. One hash per key, then one search of the table for the whole batch.

    Args:
      table, key_column: as for `place_of`.
      keys: the rows' keys, as the prepared records hold them.
    """
    wanted = np.zeros(len(keys), np.uint64)
    occurrence = np.full(len(keys), -1, np.int64)  # -1: a key that cannot name an entry
    for i, key in enumerate(keys):
        if key_column:
            wanted[i], occurrence[i] = hash64(key), 0
            continue
        derived = _DERIVED.fullmatch(key)
        if derived is not None:
            wanted[i], occurrence[i] = int(derived.group(1), 16), int(derived.group(2))
    start = np.searchsorted(table["hash"], wanted, side="left")
    end = np.searchsorted(table["hash"], wanted, side="right")
    found = (occurrence >= 0) & (start + occurrence < end)
    entries = table[np.where(found, start + occurrence, 0)] if len(table) else np.zeros(len(keys), DTYPE)
    files = np.where(found, entries["file"].astype(np.int64), -1)
    return files, np.where(found, entries["line"], 0).astype(np.uint32)
