"""CSV chunks are profiled and encoded a column at a time; on awkward input the findings, bytes, statistics and
bad-row messages equal the row-by-row path's, chunk by chunk."""

from __future__ import annotations

import dataclasses
import random
import tempfile

import numpy as np
import pytest

from estimator_lib.config import PrepareConfig
from estimator_lib.data import encode, keys, prepare, profile, score
from estimator_lib.data.plan import decide_schema, encode_plan
from estimator_lib.data.read import Chunk, clean_column, csv_records, iter_chunks, records, resolve_inputs, spaced
from estimator_lib.schema import CATEGORICAL, CLASSIFICATION, NUMERIC, FeatureSpec, LabelSpec, Schema, safe_key

NUMBERS = ["1.5", "-0.0", "0", "2", "1e-3", "  3.25 ", "1_000", "3.4028234e38", "-7", "12345678.9", "0.1"]
AWKWARD = ["", "NA", " NA ", "None", "abc", "1.2.3", "nan", "-Inf", "1e39", '"4.5"', '" 6 "']
WORDS = ["Biscoe", "Dream", " Torgersen ", '"a, b"', '"two\nlines"', '"say ""hi"""', "Émile", "N/A", "", "7"]


def _rows(seed: int, n: int, label: str, key: bool) -> list:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        plain = (i // 100) % 2 == 0  # runs of rows without quotes: plain chunks, split without the csv module
        x = [
            rng.choice([v for v in (NUMBERS if rng.random() < 0.85 else AWKWARD) if not plain or '"' not in v])
            for _ in range(3)
        ]
        row = x + [
            rng.choice([w for w in WORDS if not plain or '"' not in w]),
            rng.choice(["1", "2", "3.0", "x", "NA"]),
            _label(rng, label),
        ]
        if key:
            row.append(rng.choice(["", f"k{i}", f"k{i // 7}"]))
        if rng.random() < 0.03:
            row = row[:-1]  # a field short
        rows.append(",".join(row) if rng.random() > 0.03 else "")  # some blank lines
    for _ in range(5):
        rows.append(rows[3])  # repeated content: occurrence numbers in derived keys
    return rows


def _label(rng: random.Random, kind: str) -> str:
    if kind == "classes":
        return (
            rng.choice(["yes", "no", "no", " yes", "maybe", "NA"]) if rng.random() < 0.2 else rng.choice(["yes", "no"])
        )
    if kind == "whole":
        return rng.choice(["0", "1", "1.0", "2", "2.5", "NA"])
    return rng.choice(NUMBERS[:5] + ["NA", "1e39", "abc", "inf"])


def _write(tmp_path, label: str, key: bool, seed: int = 0, n: int = 1200) -> str:
    # "x 15 word" is categorical and sorts between numeric keys: numeric runs on both sides of it.
    header = ["x 1", "x{2}", "x3", "x 15 word", "count", "label"] + (["id"] if key else [])
    path = tmp_path / "data.csv"
    path.write_text("\r\n".join([",".join(header)] + _rows(seed, n, label, key)) + "\r\n", encoding="utf-8")
    return str(path)


def _config(path: str, **kwargs) -> PrepareConfig:
    return PrepareConfig(data=(path,), label="label", chunk_bytes=1024, num_workers=1, **kwargs)


def _tasks(config: PrepareConfig, plan: encode.EncodePlan = None):
    inputs = resolve_inputs(config.data, config.input_format)
    header_check = (lambda chunk: None) if plan is not None else prepare._header_check(config)
    found, chunk_rows, starts, scans = prepare._profile(inputs, config, header_check, prepare.IN_PROCESS, "test")
    if plan is None:
        plan = encode_plan(decide_schema(found, config, None, None), config)
    facts = _facts(inputs, config, found, chunk_rows)
    return plan, list(prepare._tasks(inputs, config, facts, scans))


def _facts(inputs, config: PrepareConfig, found, chunk_rows):
    """Pass 2's facts as `prepare` gives them in-process (the places tables go to a directory thrown away)."""
    fractions = (config.eval_fraction, config.test_fraction, config.valid_fraction)
    key_plan = keys.prepare_plan([i.name for i in inputs], config.key_column is not None, fractions, found.rows)
    with tempfile.TemporaryDirectory() as staging:
        repeats = keys.in_process(found, chunk_rows, key_plan, staging)
    return prepare.chunk_facts(found, chunk_rows, repeats, config.key_column is not None)


def _encoded_alike(tasks, plan) -> int:
    encode.init_worker(plan)
    bad = 0
    for task in tasks:
        columns, rows = encode._encode_csv(task, plan), encode._encode_rows(task, plan)
        assert _plain(columns) == _plain(rows), task.chunk.first_line
        bad += len(rows.bad)
    return bad


def _plain(result: encode.ChunkResult) -> dict:
    """A chunk's result as comparable values: the key hashes (an array or a list) as lists."""
    return dataclasses.asdict(dataclasses.replace(result, hashes=tuple(list(map(int, h)) for h in result.hashes)))


CASES = {
    "classes, derived keys": {"label": "classes", "key": False, "kwargs": {}},
    "regression label": {"label": "numbers", "key": False, "kwargs": {}},
    "whole-number classes": {"label": "whole", "key": False, "kwargs": {}},
    "key column with duplicates": {"label": "classes", "key": True, "kwargs": {"key_column": "id"}},
    "validation and test splits": {
        "label": "classes",
        "key": False,
        "kwargs": {"test_fraction": 0.2, "valid_fraction": 0.1},
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_csv_chunks_encode_exactly_as_row_by_row(tmp_path, case):
    spec = CASES[case]
    config = _config(_write(tmp_path, spec["label"], spec["key"]), **spec["kwargs"])
    plan, tasks = _tasks(config)
    assert len(tasks) > 10
    assert _encoded_alike(tasks, plan) > 20  # the awkward rows were bad, and reported alike


def test_whole_number_categoricals_and_scoring_encode_exactly_as_row_by_row(tmp_path):
    schema = Schema(
        (
            FeatureSpec("x 1", safe_key("x 1"), NUMERIC, mean=0.0, std=1.0),
            FeatureSpec("x3", safe_key("x3"), NUMERIC, mean=0.0, std=1.0),
            FeatureSpec("x 15 word", safe_key("x 15 word"), CATEGORICAL, value_type="string", vocabulary=("Dream",)),
            FeatureSpec("count", safe_key("count"), CATEGORICAL, value_type="int", vocabulary=("1", "2")),
        ),
        LabelSpec("label", CLASSIFICATION, classes=("no", "yes")),
    )
    config = _config(_write(tmp_path, "classes", key=False))
    plan, tasks = _tasks(config, score.encode_plan(schema, config))
    assert plan.optional_label
    assert _encoded_alike(tasks, plan) > 20


@pytest.mark.parametrize("case", sorted(CASES))
def test_csv_chunks_profile_exactly_as_row_by_row(tmp_path, case):
    spec = CASES[case]
    config = _config(_write(tmp_path, spec["label"], spec["key"], seed=1), max_classes=3, **spec["kwargs"])
    plan = profile.ProfilePlan("label", config.key_column, frozenset(config.missing_values), 0.2, 0.1, 0.05, 3)
    profile.init_worker(plan)
    chunks = list(iter_chunks(resolve_inputs(config.data, "auto"), config.chunk_bytes, []))
    overflowed = 0
    for chunk in chunks:
        columns, rows = profile._profile_csv(chunk, plan), profile._profile_rows(chunk, plan)
        for name in ("key_hashes", "valid", "lines"):
            assert np.array_equal(getattr(columns, name)[0], getattr(rows, name)[0]), (name, chunk.first_line)
        for name in ("rows", "columns", "first_seen", "label_all", "label_train", "label_overflow"):
            assert getattr(columns, name) == getattr(rows, name), (name, chunk.first_line)
        assert list(columns.label_all.items()) == list(rows.label_all.items())
        overflowed += rows.label_overflow
    assert len(chunks) > 10
    assert overflowed > 0 or spec["label"] != "numbers"  # more label values than max_classes=3, counted alike


@pytest.mark.parametrize(
    "text",
    ["1,a\n2,b\n", "1,a\r\n\r\n2,b", "\n1, a \n\n,\n", "1,a\r2,b\n", '1,"a\n b"\n2,b\n', "1,a\x00\n", "x\n\n"],
)
def test_csv_records_are_the_csv_modules(text):
    chunk = Chunk(0, "data.csv", "csv", 7, text, ("n", "w"))
    lines, fields = csv_records(chunk)
    assert list(zip(lines, fields)) == list(records(chunk))


def test_a_column_is_cleaned_only_when_a_value_needs_it():
    missing = frozenset(["", "NA"])
    clean = ("1", "b", "2")
    assert clean_column(clean, missing) is clean
    assert clean_column(("1", "b c"), missing) == ["1", "b c"]
    assert clean_column(("1", " 2", "x"), missing) == ["1", "2", "x"]
    assert clean_column(("1", "NA", "2"), missing) == ["1", None, "2"]
    assert clean_column(("1", "", "2"), missing) == ["1", None, "2"]
    assert clean_column(("1", "2\t"), missing, spaced=True) == ["1", "2"]
    assert spaced('1,"a"\n') and spaced("1, a\n") and spaced("1,é\n") and not spaced("1,a\r\n2,b\n")
