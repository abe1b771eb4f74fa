"""Plain CSV chunks read and converted in C++ by Apache Arrow, with exactly the csv module's and `float()`'s
results; anything Arrow would read differently is left to the Python readers in `read`.

Arrow reads a chunk only when its text is plain: no quotes, no NUL, no carriage return but before a newline,
no blank line and no white space inside a line (so no field needs `clean`'s strip). Every line is then one
record of comma-separated fields, exactly as the csv module splits it, and record i sits on line
`first_line + i`. A record whose field count differs from the header's makes Arrow refuse the chunk
(`table` returns None) and the Python readers name it. Missing-value tokens become nulls (Arrow's
`null_values` compares whole fields, as `clean` compares stripped ones).

Numbers: Arrow's string-to-float64 cast (fast_float, correctly rounded, as `float()` is) accepts a subset of
what `float()` accepts: no surrounding white space, no `_` between digits, no non-ASCII digits. A column
it refuses is converted by `float()` instead. Its one extension, `nan(...)`, is not finite, and every
non-finite value is checked again by `float()`, so each number taken from Arrow is `float(text)`.
"""

from __future__ import annotations

import io
import re
from typing import FrozenSet, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from estimator_lib.data import read
from estimator_lib.data.read import Chunk, spaced

# White space other than line ends, as str.strip sees it (re's \s is str.isspace for str patterns).
_INNER_SPACE = re.compile(r"[^\S\r\n]")


def plain(text: str) -> bool:
    """True when Arrow reads the lines of `text` as the csv module reads them (`read.plain`), no field
    needing a strip (blank lines aside: `table` refuses a chunk that has any)."""
    return read.plain(text) and not (spaced(text) if text.isascii() else _INNER_SPACE.search(text))


def table(chunk: Chunk, missing: FrozenSet[str]) -> Optional[pa.Table]:
    """The chunk's records as string columns named by the header (missing values null), or None when the
    chunk is not `plain` or a record's field count differs from the header's."""
    header = chunk.columns or ()
    if not header or not plain(chunk.text):
        return None
    try:
        table = pcsv.read_csv(
            io.BytesIO(chunk.text.encode("utf-8")),
            read_options=pcsv.ReadOptions(column_names=list(header), use_threads=False, block_size=1 << 30),
            parse_options=pcsv.ParseOptions(quote_char=False, newlines_in_values=False, ignore_empty_lines=True),
            convert_options=pcsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                null_values=sorted(missing),
                strings_can_be_null=True,
            ),
        )
    except pa.ArrowInvalid:
        return None
    lines = chunk.text.count("\n") + (not chunk.text.endswith("\n"))
    return table if table.num_rows == lines else None  # fewer rows: Arrow skipped blank lines


def numbers(column: pa.ChunkedArray) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """(float64 `float()` of every present value, NaN where missing; present), or None when Arrow's cast
    refuses a value or reads one as not finite (`float()` decides those)."""
    try:
        values = pc.cast(column, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if column.null_count:
        valid, out = present(column), _floats(values.fill_null(np.nan))
    else:
        valid, out = np.ones(len(column), bool), _floats(values)
    if not np.isfinite(out[valid]).all():
        return None
    return out, valid


def first(column: pa.ChunkedArray) -> Optional[str]:
    """The column's first present value (None if it has none)."""
    for chunk in column.chunks:
        present = chunk.drop_null()
        if len(present):
            return present[0].as_py()
    return None


def texts(column: pa.ChunkedArray) -> List[Optional[str]]:
    """The column's values (None where missing)."""
    return column.to_pylist()


def distinct(column: pa.ChunkedArray) -> Tuple[List[str], np.ndarray]:
    """(the distinct present values in order of first appearance, int64 index into them per row, -1 where
    missing)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    indices = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return encoded.dictionary.to_pylist(), indices


def content_texts(tbl: pa.Table, names: List[str]) -> List[bytes]:
    """`common.content_text` of every row as UTF-8 (present values by column name, in `names` order; the
    caller sorts them)."""
    if not any(tbl.column(n).null_count for n in names):  # one join: name, value, separator, name, ...
        pieces = [item for i, n in enumerate(names) for item in (("\x1f" if i else "") + n + "\x1e", tbl.column(n))]
        return pc.cast(pc.binary_join_element_wise(*pieces, ""), pa.binary()).to_pylist()
    # Each present value as "name\x1evalue\x1f", missing ones as "": joined, then the last "\x1f" cut.
    # (Not null_handling="skip": Arrow 25 drops the rows whose values are all null from its result.)
    parts = [pc.binary_join_element_wise(f"{n}\x1e", tbl.column(n), "\x1f", "").fill_null("") for n in names]
    joined = pc.binary_join_element_wise(*parts, "")
    return pc.cast(pc.utf8_slice_codeunits(joined, 0, -1), pa.binary()).to_pylist()


def present(column: pa.ChunkedArray) -> np.ndarray:
    """bool [rows]: the values that are not missing."""
    return pc.is_valid(column).to_numpy(zero_copy_only=False)


def _floats(values: pa.ChunkedArray) -> np.ndarray:
    return values.to_numpy().astype(np.float64, copy=True)
