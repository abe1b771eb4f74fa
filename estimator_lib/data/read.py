"""Reading CSV and JSON Lines input as a stream of text chunks, and parsing the records inside a chunk.

The parent process reads each file in fixed-size byte blocks (never a whole file), decodes UTF-8, and cuts
the text at record boundaries (for CSV, a newline outside quotes), so every chunk holds whole records and
carries the line number it starts at. Chunk boundaries depend only on the bytes and `chunk_bytes`, never on
the storage backend or the number of workers, which keeps outputs bitwise identical.

Workers turn a chunk's records into cleaned text values: surrounding white space stripped, missing-value
tokens mapped to None. JSON values become the same text a CSV would hold (numbers as their shortest repr,
booleans as "true"/"false", null as missing).
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import dataclasses
import gzip
import hashlib
import io
import json
import os
import posixpath
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from estimator_lib import storage
from estimator_lib.data.common import DataError, where

CSV, JSONL = "csv", "jsonl"
_EXTENSIONS = {".csv": CSV, ".jsonl": JSONL, ".json": JSONL, ".ndjson": JSONL}
GZIP = ".gz"  # any input may be gzip-compressed: data.csv.gz, rows.jsonl.gz
# Largest CSV field accepted, in characters (Python's csv module stops at 128 KiB by default).
MAX_FIELD_CHARS = 16 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class InputFile:
    """One input file: its location, the location-free name used in messages and outputs, its format."""

    uri: str
    name: str
    fmt: str


@dataclasses.dataclass(frozen=True)
class Chunk:
    """Whole records of one file. `columns` is the CSV header (None for JSON Lines)."""

    file_index: int
    file_name: str
    fmt: str
    first_line: int
    text: str
    columns: Optional[Tuple[str, ...]]


@dataclasses.dataclass
class FileScan:
    """What reading one file found: its content digest and size."""

    sha256: str = ""
    size: int = 0


# -- input resolution --------------------------------------------------------------------------------------
def resolve_inputs(patterns: Sequence[str], input_format: str) -> List[InputFile]:
    """Expands paths, gs:// URIs and globs to files in a fixed order; errors name a pattern matching nothing."""
    uris: List[str] = []
    for pattern in patterns:
        matched = storage.glob(pattern)
        if not matched:
            raise DataError(f"no input file matches {pattern!r}; check the path (globs may use * ? [...])")
        uris.extend(u for u in matched if u not in uris)
    names = display_names(uris)
    return [InputFile(uri, name, file_format(uri, input_format)) for uri, name in zip(uris, names)]


def display_names(uris: Sequence[str]) -> List[str]:
    """Names relative to the inputs' common directory: the same for a local run and a gs:// run."""
    dirs = [posixpath.dirname(u.replace(os.sep, "/")) for u in uris]
    common = dirs[0]
    while any(not (d == common or d.startswith(common + "/")) for d in dirs):
        common = posixpath.dirname(common)
    return [u.replace(os.sep, "/")[len(common) :].lstrip("/") for u in uris]


def file_format(uri: str, input_format: str) -> str:
    if input_format != "auto":
        return input_format
    name = uri.lower()
    ext = os.path.splitext(name[: -len(GZIP)] if name.endswith(GZIP) else name)[1]
    if ext not in _EXTENSIONS:
        raise DataError(
            f"cannot tell the format of {uri!r} from its extension {ext!r}; name it .csv or .jsonl (optionally "
            "gzip-compressed: .csv.gz, .jsonl.gz), or set input_format='csv' or 'jsonl'"
        )
    return _EXTENSIONS[ext]


# -- chunking (parent process) -----------------------------------------------------------------------------
def iter_chunks(inputs: Sequence[InputFile], chunk_bytes: int, scans: List[FileScan]) -> Iterator[Chunk]:
    """Yields every file's chunks in order; fills `scans` (one per file) as files are read."""
    for index, item in enumerate(inputs):
        scan = FileScan()
        scans.append(scan)
        yield from file_chunks(index, item, chunk_bytes, scan)


def file_chunks(index: int, item: InputFile, chunk_bytes: int, scan: FileScan) -> Iterator[Chunk]:
    """One file's chunks (`index` is its place among the inputs); fills `scan` once the file is read whole.

    Chunking a file is sequential: each cut depends on the text before it (a quoted CSV field may hold
    newlines), so one reader reads a file from its start; different files can be read in parallel."""
    digest = hashlib.sha256()
    header: Optional[Tuple[str, ...]] = None
    for first_line, text in _text_pieces(item, chunk_bytes, digest, scan):
        if item.fmt == CSV and header is None:
            header, first_line, text = _split_header(item.name, first_line, text)
        if text.strip():
            yield Chunk(index, item.name, item.fmt, first_line, text, header)
    scan.sha256 = digest.hexdigest()


def _text_pieces(item: InputFile, chunk_bytes: int, digest: Any, scan: FileScan) -> Iterator[Tuple[int, str]]:
    """(first line, text) pieces of whole records, about `chunk_bytes` each."""
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    carry, line = "", 1
    with _open_text_bytes(item) as stream:
        while True:
            block = _read_block(stream, chunk_bytes, item)
            digest.update(block)
            text = carry + _decode(decoder, block, item.name, scan.size)
            scan.size += len(block)
            if not block:
                if text:
                    yield line, text
                return
            cut = record_boundary(text, quoted=item.fmt == CSV)
            if cut < 0:
                carry = text  # one record longer than a block: read on
                continue
            piece, carry = text[: cut + 1], text[cut + 1 :]
            yield line, piece
            line += piece.count("\n")


@contextlib.contextmanager
def _open_text_bytes(item: InputFile) -> Iterator[Any]:
    """The file's bytes, decompressed when its name ends in .gz (sizes and offsets are then uncompressed)."""
    with storage.open_read(item.uri) as raw:
        if item.uri.lower().endswith(GZIP):
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield unzipped
        else:
            yield raw


def _read_block(stream: Any, size: int, item: InputFile) -> bytes:
    """Exactly `size` bytes unless the stream ends (so chunking is the same for every backend)."""
    parts, remaining = [], size
    while remaining > 0:
        try:
            data = stream.read(remaining)
        except (OSError, EOFError) as e:  # gzip: not gzip data, a bad CRC, or cut short
            raise DataError(f"{item.name}: cannot decompress it as gzip ({e}); check the file is complete") from None
        if not data:
            break
        parts.append(data)
        remaining -= len(data)
    return b"".join(parts)


def _decode(decoder: Any, block: bytes, name: str, offset: int) -> str:
    try:
        return decoder.decode(block, final=not block)
    except UnicodeDecodeError as e:
        raise DataError(
            f"{name}: the bytes near offset {offset + max(e.start, 0)} are not UTF-8 text; save the file as UTF-8"
        ) from None


def record_boundary(text: str, quoted: bool) -> int:
    """Index of the last newline that ends a record (-1 if none); for CSV, one outside double quotes."""
    cut = text.rfind("\n")
    if not quoted or cut < 0 or '"' not in text:
        return cut
    odd = text.count('"', 0, cut) % 2
    while cut >= 0 and odd:
        previous = text.rfind("\n", 0, cut)
        odd ^= text.count('"', previous + 1, cut) % 2
        cut = previous
    return cut


def _csv_reader(text: str) -> Any:
    csv.field_size_limit(MAX_FIELD_CHARS)  # per process: workers parse too
    return csv.reader(io.StringIO(text, newline=""))


def _split_header(name: str, first_line: int, text: str) -> Tuple[Tuple[str, ...], int, str]:
    """Parses the CSV header off the first piece; returns (header, line after it, rest of the text)."""
    reader = _csv_reader(text)
    record: List[str] = []
    while not record:
        record = next(reader, None)  # type: ignore[assignment]
        if record is None:
            return (), first_line, ""
    consumed = reader.line_num
    pos = 0
    for _ in range(consumed):
        found = text.find("\n", pos)
        pos = len(text) if found < 0 else found + 1
    return check_header(name, record), first_line + consumed, text[pos:]


def check_header(name: str, record: Sequence[str]) -> Tuple[str, ...]:
    header = tuple(c.strip() for c in record)
    if any(not c for c in header):
        empty = [i + 1 for i, c in enumerate(header) if not c]
        raise DataError(f"{name} line 1: header column(s) {empty} have no name; give every column a name")
    dupes = sorted({c for c in header if header.count(c) > 1})
    if dupes:
        raise DataError(f"{name} line 1: column name(s) {dupes} appear more than once in the header")
    return header


# -- records (worker processes) ----------------------------------------------------------------------------
Record = Union[List[str], str]


def records(chunk: Chunk) -> Iterator[Tuple[int, Record]]:
    """(line, record) pairs: CSV fields as a list, JSON Lines as the raw line. Blank lines are skipped."""
    if chunk.fmt == CSV:
        reader = _csv_reader(chunk.text)
        consumed = 0
        try:
            for fields in reader:
                line, consumed = chunk.first_line + consumed, reader.line_num
                if fields:
                    yield line, fields
        except csv.Error as e:
            place = where(chunk.file_name, chunk.first_line + consumed)
            if "field larger than field limit" in str(e):
                column = _oversized_column(chunk, consumed)
                raise DataError(
                    f"{place}: column {column!r} holds a value longer than {MAX_FIELD_CHARS} characters, the "
                    "largest CSV field prepare reads; shorten it or drop the column"
                ) from None
            raise DataError(f"{place}: malformed CSV ({e})") from None
        return
    for offset, text in enumerate(chunk.text.split("\n")):
        if text.strip():
            yield chunk.first_line + offset, text


def csv_records(chunk: Chunk) -> Tuple[List[int], List[List[str]]]:
    """`records` of a CSV chunk as two lists: each record's line, and its fields."""
    if plain(chunk.text):
        return _plain_records(chunk)
    pairs = list(records(chunk))
    return [line for line, _ in pairs], [fields for _, fields in pairs]  # type: ignore[misc]


def plain(text: str) -> bool:
    """True when the csv module would read every line of `text` as one record of its comma-separated
    fields: no quotes, no NUL, no carriage return but before a newline, no field beyond the size limit."""
    return (
        '"' not in text
        and "\x00" not in text
        and ("\r" not in text or text.count("\r") == text.count("\r\n"))
        and len(text) <= MAX_FIELD_CHARS
    )


def _plain_records(chunk: Chunk) -> Tuple[List[int], List[List[str]]]:
    """`csv_records` of a `plain` chunk: str.split does the csv module's work in a fraction of its time."""
    lines = chunk.text.replace("\r\n", "\n").split("\n")
    if lines.count("") == (lines[-1] == ""):  # no blank line but the text's end
        lines = lines[:-1] if lines[-1] == "" else lines
        return list(range(chunk.first_line, chunk.first_line + len(lines))), [t.split(",") for t in lines]
    kept = [i for i, t in enumerate(lines) if t]
    return [chunk.first_line + i for i in kept], [lines[i].split(",") for i in kept]


def _oversized_column(chunk: Chunk, consumed_lines: int) -> str:
    """The header name (or 1-based position) of the first field over MAX_FIELD_CHARS in the record that
    starts after `consumed_lines` lines of the chunk."""
    start = 0
    for _ in range(consumed_lines):
        start = chunk.text.index("\n", start) + 1
    index, size, quoted, text = 0, 0, False, chunk.text
    for pos in range(start, len(text)):
        ch = text[pos]
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            index, size = index + 1, 0
            continue
        elif ch == "\n" and not quoted:
            break
        size += 1
        if size > MAX_FIELD_CHARS:
            break
    names = chunk.columns or ()
    return names[index] if index < len(names) else f"field {index + 1}"


class BadRecord(Exception):
    """A record that cannot be read as a row at all; carries the column (if any), value and reason."""

    def __init__(self, reason: str, column: Optional[str] = None, value: Any = None):
        super().__init__(reason)
        self.reason, self.column, self.value = reason, column, value

    def placed(self, file_name: str, line: int) -> str:
        """The reason with its place: "rows.jsonl line 3, column 'x': ...", or "rows.jsonl line 3: the record
        ..." when no one column is at fault."""
        if self.column is None:
            return f"{where(file_name, line)}: the record {self.reason}"
        return f"{where(file_name, line, self.column)}: {self.reason}"


# What a failure over a nested JSON value adds to the row's reason: the pipeline's way for such data.
NESTED_HELP = (
    "a list or an object is not a column value. Vectors and sequences go through your own model_fn instead: write "
    "them as TFRecords of tf.train.Example described by a feature spec, and give --model-fn and --feature-spec "
    "(see docs/byom.md)"
)


def with_help(reason: str, value: Any) -> str:
    """A bad row's reason for a failure message: for a nested JSON value (a list or an object in a column), with
    `NESTED_HELP`."""
    return f"{reason}; {NESTED_HELP}" if isinstance(value, (list, dict)) else reason


def clean(value: str, missing: FrozenSet[str]) -> Optional[str]:
    text = value.strip()
    return None if text in missing else text


_ASCII_SPACE = " \t\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip removes from ASCII text, bar line ends


def spaced(text: str) -> bool:
    """False when no CSV field of `text` can hold white space (checked in C: ASCII text without quotes, whose
    only white space ends lines), so no field needs `clean`'s strip."""
    return not text.isascii() or '"' in text or any(c in text for c in _ASCII_SPACE)


def clean_column(values: Sequence[str], missing: FrozenSet[str], spaced: bool = True) -> Sequence[Optional[str]]:
    """`clean` of every value of a column; the column itself when no value needs it (checked in C on the
    values joined: a substring search per missing token, and one split for white space unless `spaced` is
    False)."""
    joined = "\x00" + "\x00".join(values) + "\x00"
    if not any(f"\x00{token}\x00" in joined for token in missing) and not (spaced and _has_space(joined)):
        return values
    return [None if (text := v.strip()) in missing else text for v in values]


def _has_space(text: str) -> bool:
    return text.split() != [text]


def csv_columns(
    chunk: Chunk, rows: Sequence[List[str]], names: Sequence[str], missing: FrozenSet[str]
) -> Dict[str, Sequence[Optional[str]]]:
    """{name: cleaned values, one per row} of the `names` in the chunk's header. A row whose field count
    differs from the header's holds None in every column (`csv_values` reports it)."""
    header = chunk.columns or ()
    width, space = len(header), spaced(chunk.text)
    lengths = list(map(len, rows))
    ragged = [] if lengths.count(width) == len(rows) else [i for i, n in enumerate(lengths) if n != width]
    if ragged:
        filler = [""] * width
        rows = [r if n == width else filler for r, n in zip(rows, lengths)]
    columns = list(zip(*rows)) or [()] * width
    cleaned = {n: clean_column(columns[header.index(n)], missing, space) for n in names if n in header}
    for name, values in cleaned.items():
        if ragged:
            cleaned[name] = values = list(values)
            for i in ragged:
                values[i] = None
    return cleaned


@dataclasses.dataclass
class CsvRows:
    """A CSV chunk read by Python (the csv module, or str.split when the text is plain): each record's line
    and fields, the cleaned values of the columns asked for, and bool [records]: those that fit the header."""

    lines: List[int]
    records: List[List[str]]
    values: Dict[str, Sequence[Optional[str]]]
    readable: Any


def csv_rows(chunk: Chunk, names: Sequence[str], missing: FrozenSet[str]) -> CsvRows:
    """The chunk's records and the cleaned columns `names` (`csv_records`, `csv_columns`, `fitting`): the
    Python reader of a CSV chunk both passes fall back to when Arrow does not read it (`arrow_csv.table`)."""
    lines, rows = csv_records(chunk)
    return CsvRows(lines, rows, csv_columns(chunk, rows, names, missing), fitting(rows, chunk.columns or ()))


def row_values(record: Record, chunk: Chunk, missing: FrozenSet[str]) -> Dict[str, Optional[str]]:
    """{column: cleaned text or None} of one record of the chunk, CSV or JSON Lines; raises BadRecord."""
    if chunk.fmt == CSV:
        return dict(zip(chunk.columns, csv_values(record, chunk.columns, missing)))  # type: ignore[arg-type]
    return json_values(record, missing)  # type: ignore[arg-type]


def fitting(rows: Sequence[List[str]], header: Tuple[str, ...]) -> Any:
    """bool [rows]: the records with as many fields as the header (the others cannot be read as rows)."""
    return np.fromiter(map(len, rows), np.int64, len(rows)) == len(header)


def csv_values(fields: List[str], header: Tuple[str, ...], missing: FrozenSet[str]) -> List[Optional[str]]:
    if len(fields) != len(header):
        raise BadRecord(f"has {len(fields)} field(s) but the header has {len(header)} columns")
    return [None if (text := v.strip()) in missing else text for v in fields]


def json_values(text: str, missing: FrozenSet[str]) -> dict:
    """{column: cleaned text or None} of one JSON Lines record."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise BadRecord(f"is not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise BadRecord(f'is a JSON {type(obj).__name__}, expected an object {{"column": value, ...}}')
    return {name: json_text(name, value, missing) for name, value in obj.items()}


def json_text(name: str, value: Any, missing: FrozenSet[str]) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return clean(value, missing)
    raise BadRecord(
        f"{json.dumps(value)[:80]} is a nested JSON value; expected a number, string, boolean or null",
        column=name,
        value=value,
    )


def raw_row(record: Record, header: Optional[Tuple[str, ...]]) -> Any:
    """The record as written to the quarantine file: {column: raw text} for CSV, the object or line for JSON."""
    if isinstance(record, str):
        try:
            return json.loads(record)
        except ValueError:
            return record
    if header is not None and len(record) == len(header):
        return dict(zip(header, record))
    return list(record)
