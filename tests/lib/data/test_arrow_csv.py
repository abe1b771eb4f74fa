"""Plain CSV chunks are read and their numbers cast by Arrow (`arrow_csv`); everything it reads equals what the
csv module and `float()` give, and whatever it would read differently goes to the Python readers, so every
output byte and every message is the same with and without it."""

from __future__ import annotations

import gzip
import os
import random
import struct

import numpy as np
import pyarrow as pa
import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data import arrow_csv, encode, keys, prepare, profile
from estimator_lib.data.common import DataError, content_text
from estimator_lib.data.read import Chunk, iter_chunks, resolve_inputs

HEADER = ("x", "y", "word", "count", "label")


def _chunk(text: str, header=HEADER) -> Chunk:
    return Chunk(0, "data.csv", "csv", 2, text, header)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1,2\n3,4\n", True),
        ("1,2\r\n3,4\r\n", True),  # CRLF line ends
        ("1,2\n3,4", True),  # no newline at the end
        ("Émile,2\n", True),  # non-ASCII without white space
        ('1,"2"\n', False),  # quotes: the csv module's rules
        ("1, 2\n", False),  # a field to strip
        ("1,2\u00a0\n", False),  # non-ASCII white space to strip
        ("1,2\x1f\n", False),  # str.strip removes \x1f too
        ("1,2\r3,4\n", False),  # a lone carriage return
        ("1,\x002\n", False),
    ],
)
def test_plain_says_which_texts_arrow_reads_as_the_csv_module(text, expected):
    assert arrow_csv.plain(text) is expected


def test_table_refuses_records_that_do_not_fit_the_header():
    assert arrow_csv.table(_chunk("1,2,a,3,yes\n4,5,b,yes\n"), frozenset()) is None  # a field short
    for blank in ("1,2,a,3,yes\n\n4,5,b,6,no\n", "\r\n1,2,a,3,yes\r\n", "1,2,a,3,yes\n\n"):
        assert arrow_csv.table(_chunk(blank), frozenset()) is None  # the csv module skips blank lines
    assert arrow_csv.table(_chunk("1\n\n2\n", ("x",)), frozenset()) is None
    table = arrow_csv.table(_chunk("1,NA,a,,yes\r\n4,5,b,6,no\r\n"), frozenset({"", "NA"}))
    assert table.column_names == list(HEADER)
    assert table.column("y").to_pylist() == [None, "5"]
    assert table.column("count").to_pylist() == [None, "6"]


TOKENS = [
    "0", "-0", "-0.0", "+1", "1.", ".5", "-.5", "1e5", "1E+05", "00012", "0.1", "3.4028234e38", "5e-324",
    "1e-400", "123456789012345678901234567890", "9007199254740993", "0.30000000000000004", "2.5e-3",
]  # fmt: skip


def test_numbers_are_float_of_the_text_bit_for_bit():
    rng = random.Random(0)
    texts = TOKENS + [repr(rng.uniform(-1e6, 1e6)) for _ in range(500)] + [f"{rng.gauss(0, 1):.5f}" for _ in range(500)]
    numbers, present = arrow_csv.numbers(pa.chunked_array([pa.array(texts + [None], pa.string())]))
    assert present.tolist() == [True] * len(texts) + [False]
    assert [struct.pack("<d", x) for x in numbers[:-1]] == [struct.pack("<d", float(t)) for t in texts]
    assert np.isnan(numbers[-1])


@pytest.mark.parametrize("odd", ["1_000", " 1", "1 ", "١٢", "inf", "-Infinity", "nan", "nan(1)", "1e400", "abc", ""])
def test_numbers_leave_what_arrow_reads_otherwise_or_not_finite_to_float(odd):
    assert arrow_csv.numbers(pa.chunked_array([pa.array(["1.5", odd], pa.string())])) is None


def test_content_texts_are_content_text_even_for_rows_without_values():
    names = ["b", "a", "c"]
    columns = {"a": ["1", None, None, "x"], "b": [None, None, "2", "y"], "c": ["3", None, None, "z"]}
    table = pa.table({n: pa.array(v, pa.string()) for n, v in columns.items()})
    expected = [content_text((n, columns[n][i]) for n in names).encode() for i in range(4)]
    assert arrow_csv.content_texts(table, sorted(names)) == expected
    full = pa.table({n: pa.array(v[3:], pa.string()) for n, v in columns.items()})  # no missing value: one join
    assert arrow_csv.content_texts(full, sorted(names)) == expected[3:]


# -- whole preparations: with Arrow and without, the same bytes and messages ------------------------------
ODD_NUMBERS = ["1_000", "inf", "nan", "-Infinity", "nan(1)", "1e39", "abc", "١٢", "NA", "", "-0.0", "+2", ".5"]


def _row(rng: random.Random, i: int, label: str) -> str:
    x = rng.choice(ODD_NUMBERS) if rng.random() < 0.01 else f"{rng.gauss(0, 3):.4f}"
    y = rng.choice(["NA", ""]) if rng.random() < 0.05 else str(rng.randint(-50, 50))
    word = rng.choice(["Biscoe", "Dream", "Émile", "NA", "7"])
    count = rng.choice(["1", "2", "3.0", "2e0"])
    if label == "regression":
        target = f"{rng.uniform(0, 10):.3f}" if rng.random() > 0.01 else rng.choice(["NA", "1e39", "abc"])
    else:
        target = rng.choice(["yes", "no", "1", "maybe"] if rng.random() < 0.01 else ["yes", "no"])
    if i % 500 == 7:  # now and then a record Arrow cannot read as plain: quotes, spaces, a field short
        return rng.choice([f'"{x}",{y},"a, b",{count},{target}', f" {x} ,{y},{word},{count},{target}", f"{x},{y}"])
    return ",".join([x, y, word, count, target])


def _write(tmp_path, label: str, *, crlf: bool = False, gz: bool = False, key: bool = False, n: int = 3000) -> str:
    rng = random.Random(7)
    rows = [_row(rng, i, label) for i in range(n)]
    rows += rows[10:13]  # repeated content: occurrence numbers in derived keys
    header = ",".join(HEADER)
    if key:
        header += ",id"
        rows = [f"{r},k{i if i % 400 else i - 1}" for i, r in enumerate(rows)]  # duplicate keys
    newline = "\r\n" if crlf else "\n"
    text = newline.join([header] + rows) + newline + newline  # an empty trailing line
    path = os.path.join(str(tmp_path), "data.csv" + (".gz" if gz else ""))
    with gzip.open(path, "wt", encoding="utf-8", newline="") if gz else open(path, "w", newline="") as f:
        f.write(text)
    return path


def _outputs(out: str) -> dict:
    found = {}
    for root, _, files in os.walk(out):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                found[os.path.relpath(os.path.join(root, name), out)] = f.read()
    return found


def _prepared(monkeypatch, tmp_path, name: str, arrow: bool, config: PrepareConfig):
    with monkeypatch.context() as m:
        if not arrow:
            m.setattr(arrow_csv, "table", lambda chunk, missing: None)
        out = os.path.join(str(tmp_path), name)
        try:
            prepare.prepare(config, out)
        except DataError as e:
            return str(e)
        return _outputs(out)


CASES = {
    "classes, derived keys, CRLF": ({"crlf": True}, {}),
    "regression label": ({"label": "regression"}, {}),
    "key column with duplicates, gzip": ({"key": True, "gz": True}, {"key_column": "id"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_prepare_writes_the_same_bytes_with_and_without_arrow(monkeypatch, tmp_path, case):
    file_kwargs, config_kwargs = CASES[case]
    file_kwargs = {"label": "classes", **file_kwargs}
    path = _write(tmp_path, **file_kwargs)
    config = PrepareConfig(
        data=(path,),
        label="label",
        chunk_bytes=4096,
        num_workers=1,
        num_shards=3,
        bad_rows="quarantine",
        max_bad_fraction=0.2,
        **config_kwargs,
    )
    with_arrow = _prepared(monkeypatch, tmp_path, "arrow", True, config)
    without = _prepared(monkeypatch, tmp_path, "python", False, config)
    assert isinstance(with_arrow, dict) and with_arrow.keys() == without.keys()
    assert "quarantine.jsonl" in with_arrow and "profile.json" in with_arrow
    for name in with_arrow:
        assert with_arrow[name] == without[name], name


def test_a_bad_number_mid_chunk_fails_with_the_same_message(monkeypatch, tmp_path):
    rows = [f"{i / 7:.4f},{i},w,1,{'yes' if i % 3 else 'no'}" for i in range(200)]
    rows[123] = "0.5,1e39,w,1,yes"
    path = tmp_path / "data.csv"
    path.write_text("\n".join([",".join(HEADER)] + rows) + "\n")
    config = PrepareConfig(data=(str(path),), label="label", num_workers=1)
    message = _prepared(monkeypatch, tmp_path, "arrow", True, config)
    assert message == _prepared(monkeypatch, tmp_path, "python", False, config)
    assert message.startswith("data.csv line 125, column 'y': '1e39' is outside the float32 range")


def test_most_chunks_of_plain_input_are_read_by_arrow(tmp_path):
    config = PrepareConfig(data=(_write(tmp_path, "classes"),), label="label", chunk_bytes=4096)
    chunks = list(iter_chunks(resolve_inputs(config.data, "auto"), config.chunk_bytes, []))
    read = [arrow_csv.table(c, frozenset(config.missing_values)) is not None for c in chunks]
    assert len(chunks) > 10 and 0.5 * len(chunks) < sum(read) < len(chunks)


def test_arrow_chunks_profile_and_encode_as_row_by_row(tmp_path):
    config = PrepareConfig(data=(_write(tmp_path, "classes"),), label="label", chunk_bytes=4096, num_workers=1)
    inputs = resolve_inputs(config.data, "auto")
    found, chunk_rows, starts, scans = prepare._profile(
        inputs, config, prepare._header_check(config), prepare.IN_PROCESS, "test"
    )
    plan = prepare.encode_plan(prepare.decide_schema(found, config, None, None), config)
    key_plan = keys.prepare_plan(
        [i.name for i in inputs], False, (config.eval_fraction, config.test_fraction, config.valid_fraction), found.rows
    )
    facts = prepare.chunk_facts(found, chunk_rows, keys.in_process(found, chunk_rows, key_plan, str(tmp_path)), False)
    encode.init_worker(plan)
    profile_plan = profile.ProfilePlan("label", None, frozenset(config.missing_values), 0.2, 0.0, 0.0, 20)
    for task in prepare._tasks(inputs, config, facts, scans):
        columns, rows = profile._profile_csv(task.chunk, profile_plan), profile._profile_rows(task.chunk, profile_plan)
        for name in ("rows", "columns", "first_seen", "label_all", "label_train"):
            assert getattr(columns, name) == getattr(rows, name), (name, task.chunk.first_line)
        assert np.array_equal(columns.key_hashes[0], rows.key_hashes[0])
        by_columns, by_rows = encode._encode_csv(task, plan), encode._encode_rows(task, plan)
        assert tuple(by_columns.examples) == tuple(by_rows.examples) and by_columns.bad == by_rows.bad
        assert by_columns.numeric == by_rows.numeric and by_columns.categories == by_rows.categories


def test_scoring_encodes_the_same_bytes_with_and_without_arrow(monkeypatch, tmp_path):
    path = _write(tmp_path, "classes", key=True)
    config = PrepareConfig(
        data=(path,), label="label", key_column="id", num_workers=1, bad_rows="quarantine", max_bad_fraction=0.2
    )
    schema = prepare.prepare(config, os.path.join(str(tmp_path), "prepared")).schema
    found = {}
    for arrow in (True, False):
        with monkeypatch.context() as m:
            if not arrow:
                m.setattr(arrow_csv, "table", lambda chunk, missing: None)
            out = os.path.join(str(tmp_path), f"scored-{arrow}")
            prepare.encode_for_scoring(
                path, schema, out, bad_rows="quarantine", max_bad_fraction=0.2, num_workers=1, chunk_bytes=4096
            )
            found[arrow] = _outputs(out)
    assert found[True].keys() == found[False].keys() and "quarantine.jsonl" in found[True]
    for name in found[True]:
        assert found[True][name] == found[False][name], name
