"""Where each prediction row came from: its input file and its line (or record), as JSON text, on the host CPU.

Two kinds of input, two ways to find a row's origin:
  * prepared rows (a prepared split, or raw rows encoded for scoring): by key, in the places table preparation
    wrote (`data.places`): the input file's name as the manifest's `inputs` give it and the 1-based line where
    the row starts (a CSV header is line 1). Fields "file", "line".
  * TFRecords given as they are: by position, from each file's record count: the file as resolved and the
    record's 0-based index in it. Fields "file", "record".

Both depend only on the row (its key, or its position in the input), never on how the rows were batched, so
every engine writes the same bytes.

A TFRecord file's records are counted from its framing alone (`records.file_records`): each record's 8-byte length says
where the next starts, so the count reads the file once but parses no record and checks no CRC. The
prediction's own read of the records checks them.
"""

from __future__ import annotations

from json.encoder import encode_basestring as _json_string
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import orjson

from estimator_lib.data import places, records
from estimator_lib.data.common import EVAL

FILE_FIELD = "file"
LINE_FIELD = "line"
RECORD_FIELD = "record"
ORIGIN_FIELDS = (FILE_FIELD, LINE_FIELD, RECORD_FIELD)  # no passthrough column may take these names
_NULL = b"null"


def _file_texts(names: Sequence[str]) -> np.ndarray:
    """Each name as a JSON string (bytes), then "null" last: index -1 (no origin) picks it."""
    return np.array([_json_string(n).encode("utf-8") for n in names] + [_NULL], dtype=object)


class KeyedOrigins:
    """Prepared rows' origins, found by key in a places table (`data.places.read_places`).

    Attributes:
      field: the name of the second field ("line").
    """

    field = LINE_FIELD

    def __init__(self, table: Optional[np.ndarray], names: Sequence[str], key_column: bool):
        """table: the places (None for a dataset prepared before they were recorded: every origin is null);
        names: the input files in the manifest's `inputs` order; key_column: keys are a key column's values."""
        self._table, self._key_column = table, key_column
        self._names = _file_texts(names)

    def texts(self, keys: np.ndarray, first_row: int) -> Tuple[List[bytes], List[bytes]]:
        """The JSON texts of the file and line of rows with these keys (bytes [n]); null for a key the table
        does not hold. `first_row` is unused: the key alone places a prepared row."""
        if self._table is None:
            return [_NULL] * len(keys), [_NULL] * len(keys)
        files, lines = places.places_of(self._table, [k.decode("utf-8") for k in keys.tolist()], self._key_column)
        return self._names[files].tolist(), _numbers(lines, files >= 0)


class RecordOrigins:
    """TFRecord rows' origins, by position: row r of the input is record r - start of the file it falls in.

    Attributes:
      field: the name of the second field ("record").
      count: the records of all files.
    """

    field = RECORD_FIELD

    def __init__(self, files: Sequence[str], counts: Sequence[int]):
        """files: the input files in the order they are read; counts: their records."""
        self._names = _file_texts(files)
        self._starts = np.cumsum([0, *counts])[:-1].astype(np.int64)
        self.count = int(sum(counts))

    def texts(self, keys: np.ndarray, first_row: int) -> Tuple[List[bytes], List[bytes]]:
        """The JSON texts of the file and record index of rows [first_row, first_row + len(keys))."""
        rows = np.arange(first_row, first_row + len(keys), dtype=np.int64)
        inside = rows < self.count
        files = np.where(inside, np.searchsorted(self._starts, rows, side="right") - 1, -1)
        return self._names[files].tolist(), _numbers(rows - self._starts[np.maximum(files, 0)], inside)


Origins = KeyedOrigins | RecordOrigins


def _numbers(values: np.ndarray, present: np.ndarray) -> List[bytes]:
    """Integers [n] as JSON numbers (one native call), "null" where not `present`."""
    if not len(values):
        return []
    texts = orjson.dumps(np.ascontiguousarray(values, np.int64), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")
    return texts if present.all() else [t if ok else _NULL for t, ok in zip(texts, present.tolist())]


def prepared_origins(output_dir: str, manifest: Dict[str, Any], key_column: bool, split: str = EVAL) -> KeyedOrigins:
    """The origins of a split's rows in the preparation at `output_dir` (raw rows encoded for scoring: "eval"),
    with its `manifest` (its `inputs` name the files); `key_column`: its keys are a key column's values."""
    names = [described["name"] for described in manifest.get("inputs", [])]
    return KeyedOrigins(places.read_places(output_dir, split), names, key_column)


def record_origins(files: Sequence[str]) -> RecordOrigins:
    """The origins of the records of `files` (read in this order): one framing pass per file (`records.file_records`).

    Raises:
      DataError: a truncated or corrupt file (`records.file_records`).
    """
    return RecordOrigins(files, [records.file_records(f) for f in files])
