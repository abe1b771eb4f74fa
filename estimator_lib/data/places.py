"""Where an eval row came from: its input file and line, found by its key.

The prepared records carry a row's key, not its place in the input. Pass 1 of preparation knows every row's key
hash, file and line, so prepare writes them for the eval split into `eval_places.npy` inside the prepared
dataset: one entry per eval row pass 1 could read, (key hash uint64, file index uint32, line uint32), sorted by
hash and, for equal hashes, in input order. A file index is the position of the file in the manifest's `inputs`.
`np.save` writes no timestamp, so the same input gives the same bytes (the dataset's fingerprint covers the file).

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
from estimator_lib.data.common import hash64, split_indices

PLACES_FILE = "eval_places.npy"
DTYPE = np.dtype([("hash", "<u8"), ("file", "<u4"), ("line", "<u4")])
_EVAL_SPLIT = 1  # `common.split_index` of the eval split
_DERIVED = re.compile(r"([0-9a-f]{16})-(\d+)")


def eval_places(
    hashes: np.ndarray,
    valid: np.ndarray,
    lines: np.ndarray,
    file_starts: Sequence[int],
    fractions: Tuple[float, float, float],
) -> np.ndarray:
    """The eval rows' places, `DTYPE` [eval rows], from pass 1's per-row arrays (all [rows]).

    Args:
      hashes: uint64 key (or content) hashes; valid: whether the row has a usable key; lines: each row's line.
      file_starts: the row index of each input file's first row.
      fractions: (eval_fraction, test_fraction, valid_fraction), as the split was cut.
    """
    rows = np.flatnonzero(valid & (split_indices(hashes, *fractions) == _EVAL_SPLIT))
    table = np.zeros(len(rows), DTYPE)
    table["hash"] = hashes[rows]
    table["file"] = np.searchsorted(np.asarray(file_starts), rows, side="right") - 1
    table["line"] = lines[rows]
    return table[np.argsort(table["hash"], kind="stable")]


def write_places(path: str, table: np.ndarray) -> None:
    """Writes `eval_places` to a local `path` (inside a staging directory)."""
    with open(path, "wb") as f:
        np.save(f, table, allow_pickle=False)


def read_places(output_dir: str) -> Optional[np.ndarray]:
    """The eval rows' places of a prepared dataset (local or gs://); None for one prepared before they were recorded."""
    uri = storage.join(output_dir, PLACES_FILE)
    if not storage.exists(uri):
        return None
    table = np.load(io.BytesIO(storage.read_bytes(uri)), allow_pickle=False)
    if table.dtype != DTYPE:
        raise ValueError(f"{uri}: entries of {table.dtype}, expected {DTYPE}; prepare the data again")
    return table


def place_of(table: np.ndarray, key: str, key_column: bool, names: Sequence[str]) -> Optional[Tuple[str, int]]:
    """(input file name, line) of the eval row with `key`, or None when the table has no entry for it.

    Args:
      table: `read_places`' entries.
      key: the row's key, as the prepared record holds it.
      key_column: whether keys are a key column's values (else derived from the rows' content).
      names: the input files' names, in the manifest's `inputs` order.
    """
    occurrence = 0
    if key_column:
        wanted = hash64(key)
    else:
        derived = _DERIVED.fullmatch(key)
        if derived is None:
            return None
        wanted, occurrence = int(derived.group(1), 16), int(derived.group(2))
    start = int(np.searchsorted(table["hash"], np.uint64(wanted), side="left"))
    end = int(np.searchsorted(table["hash"], np.uint64(wanted), side="right"))
    if start + occurrence >= end:
        return None
    entry = table[start + occurrence]
    return names[int(entry["file"])], int(entry["line"])
