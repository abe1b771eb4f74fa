"""Prediction rows as UTF-8 JSON Lines, formatted on the host CPU a batch at a time.

One JSON object per input row:
  {"key": ..., "file": input file, "line" (or "record"): its place in it (`origins`),
   <passthrough column>: value or null, ...,
   "class": name, "class_id": int, "probabilities": {name: p, ...}}      (classification)
   "value": float                                                       (regression)
Floats are written as the shortest text that reads back as the same float32 (float64 for float64 values),
by orjson's native formatter; no per-row `json.dumps`.
"""

from __future__ import annotations

import re
from json.encoder import encode_basestring as _json_string
from typing import Any, List, Sequence

import numpy as np
import orjson

from estimator_lib.model.outputs import PredictionError
from estimator_lib.predict.columns import CLASSIFICATION_FIELDS, KEY_FIELD, REGRESSION_FIELDS, Column
from estimator_lib.predict.origins import FILE_FIELD, Origins
from estimator_lib.predict.rows import Batch, HostRows
from estimator_lib.schema import CLASSIFICATION, KEY_FEATURE, Schema

# Bytes a key must not hold to be written verbatim between quotes: JSON escapes these. "\n" is absent because
# `_json_keys` joins the keys with it (so a truncated UTF-8 sequence cannot borrow bytes from the next key).
_NEEDS_ESCAPE = re.compile(rb'[\x00-\x09\x0b-\x1f"\\]')


def json_numbers(values: np.ndarray) -> List[bytes]:
    """Each value's JSON number text: for floats the shortest text that reads back as the same value in the
    array's own precision (float32 stays float32: 0.1f is "0.1", not "0.100000001"). One native call per
    column, not a Python format per value.

    Args:
      values: a 1-D numeric array [n] (float32, float64 or an integer type).

    Raises:
      ValueError: a non-finite float, which JSON cannot hold.
    """
    if values.size == 0:
        return []
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        raise ValueError(f"non-finite values {values[~np.isfinite(values)][:5].tolist()} have no JSON number")
    return orjson.dumps(np.ascontiguousarray(values), option=orjson.OPT_SERIALIZE_NUMPY)[1:-1].split(b",")


def _field(name: str, placeholder: str) -> str:
    """'"name": %s' with the name JSON-encoded and any "%" in it escaped for %-formatting."""
    return _json_string(name).replace("%", "%%") + ": " + placeholder


def _json_keys(keys: np.ndarray) -> List[bytes]:
    """The inside of each key's JSON string literal (UTF-8, without the quotes).

    Keys are almost always plain text: one regex search and one UTF-8 check over the joined batch then let
    the key bytes be written as they are. Otherwise each key is escaped (invalid UTF-8 raises).
    """
    raw = keys.tolist()
    joined = b"\n".join(raw)
    if _NEEDS_ESCAPE.search(joined) is None:
        try:
            joined.decode("utf-8")
            return raw
        except UnicodeDecodeError:
            pass
    return [_json_string(k.decode("utf-8"))[1:-1].encode("utf-8") for k in raw]


class RowFormatter:
    """Formats a batch of rows as UTF-8 JSON Lines with one bytes `%` format per batch.

    Field names and class names are encoded once; every value arrives as ready-made bytes (numbers from
    `json_numbers`), so the format only copies. The result is bytes, ready to hash and write.

    Attributes:
      fields: the output's field names in row order (the key, the origin's two, the passthrough columns, the
        model's).
    """

    def __init__(self, schema: Schema, columns: Sequence[Column], origins: Origins):
        """origins: where the rows came from (`origins.KeyedOrigins` or `origins.RecordOrigins`)."""
        self._schema = schema
        self._columns = tuple(columns)
        self._origins = origins
        self._classification = schema.label.task == CLASSIFICATION
        self._class_names = np.array([_json_string(c).encode("utf-8") for c in schema.label.classes], dtype=object)
        names = [KEY_FIELD, FILE_FIELD, origins.field] + [c.name for c in columns]
        parts = [_field(KEY_FIELD, '"%s"')] + [_field(n, "%s") for n in names[1:]]
        if self._classification:
            probs = ", ".join(_field(c, "%s") for c in schema.label.classes)
            parts += [
                _field("class", "%s"),
                _field("class_id", "%s"),
                _field("probabilities", "{" + probs + "}"),
            ]
        else:
            parts.append(_field("value", "%s"))
        self._template = ("{" + ", ".join(parts) + "}\n").encode("utf-8")
        self.fields = tuple(names) + (CLASSIFICATION_FIELDS if self._classification else REGRESSION_FIELDS)

    def format(self, host: HostRows, outputs: Batch, first_row: int) -> bytes:
        """host: key bytes [n] and passthrough (value, present) [n]; outputs: the model's arrays [n, ...]
        ("probabilities" float32 [n, classes] and "class_ids" [n] or [n, 1]; or "predictions" float32 [n, 1]);
        first_row: the input position of the first of these rows.

        Raises:
          PredictionError: a non-finite model output or passthrough number (naming the keys or the column).
          UnicodeDecodeError: a key that is not UTF-8.
        """
        n = len(host[KEY_FEATURE])
        if n == 0:
            return b""
        cols: List[Sequence[Any]] = [_json_keys(host[KEY_FEATURE]), *self._origins.texts(host[KEY_FEATURE], first_row)]
        cols += [self._render(c, *host[c.name]) for c in self._columns]
        cols += self._output_columns(outputs, host[KEY_FEATURE])
        # Row-major values by slice assignment: a C-level copy per column instead of a tuple per row.
        values: List[Any] = [None] * (n * len(cols))
        for i, column in enumerate(cols):
            values[i :: len(cols)] = column
        return (self._template * n) % tuple(values)

    def _render(self, column: Column, values: np.ndarray, present: np.ndarray) -> List[bytes]:
        if column.render == "float":
            try:
                texts = json_numbers(np.where(present, values, 0))  # a missing value may be NaN: not formatted
            except ValueError as e:
                raise PredictionError(f"passthrough column {column.name!r}: {e}") from None
            return [t if ok else b"null" for t, ok in zip(texts, present.tolist())]
        if column.render == "class_name":
            ids = np.clip(values, 0, len(self._class_names) - 1)
            return np.where(present, self._class_names[ids], b"null").tolist()
        return _texts(column, values, present)

    def _output_columns(self, outputs: Batch, keys: np.ndarray) -> List[Sequence[Any]]:
        values = outputs["probabilities"] if self._classification else outputs["predictions"]
        finite = np.isfinite(values).reshape(len(keys), -1).all(axis=1)
        if not finite.all():
            bad = keys[~finite][:5]
            raise PredictionError(f"the model returned non-finite outputs for keys {[k.decode() for k in bad]}")
        if not self._classification:
            return [json_numbers(values.reshape(-1))]
        class_ids = outputs["class_ids"].reshape(-1)
        return [
            self._class_names[class_ids].tolist(),
            json_numbers(class_ids),
            *(json_numbers(column) for column in values.T),
        ]


def _texts(column: Column, values: np.ndarray, present: np.ndarray) -> List[bytes]:
    """A text column's values ("string", "int_text" or "key") as JSON: strings, integers, or null."""
    out = []
    for value, ok in zip(values.tolist(), present.tolist()):
        text = value.decode("utf-8") if ok else None
        if text is None:
            out.append(b"null")
        elif column.render == "int_text" and text.lstrip("-").isdigit():
            out.append(str(int(text)).encode("utf-8"))
        else:
            out.append(_json_string(text).encode("utf-8"))
    return out
