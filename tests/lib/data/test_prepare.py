"""Input preparation on tiny real files: round trips through real TFRecords, stable splits, determinism."""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import struct

import numpy as np
import pytest
import tensorflow as tf
from file_trees import tree

from estimator_lib.config import ConfigError
from estimator_lib.data import output, records
from estimator_lib.data.common import SPLITS, hash64
from estimator_lib.data.embedded import default_dataset
from estimator_lib.data.prepare import PrepareConfig, PrepareResult, load_prepared, prepare
from estimator_lib.data.read import record_boundary
from estimator_lib.model import transform
from estimator_lib.schema import KEY_FEATURE, LABEL_KEY

AWKWARD = ["id", "bill length (mm)", "Île / région", "a,b;c!", "größe", "label"]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def write_csv(path, header, rows, newline="\n"):
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator=newline)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def awkward_rows(n: int):
    islands = ["Biscoe", "Dream", 'Torgersen, "north"', "multi\nline"]
    rows = []
    for i in range(n):
        bill = "NA" if i % 11 == 3 else f"{30 + (i * 7) % 25}.{i % 10}"
        size = "" if i % 13 == 5 else str((i * 37) % 1000 - 500)
        rows.append([f"k{i}", bill, islands[i % 4], f" v{i % 3} ", size, ["yes", "no"][(i * 3 // 2) % 2]])
    return rows


def read_split(result: PrepareResult, split: str):
    files = sorted(tf.io.gfile.glob(result.files(split)))
    return [records.decode_example(r, result.schema) for r in records.read_tfrecords(files)]


def all_examples(result: PrepareResult):
    return {ex["__key__"]: ex for split in SPLITS for ex in read_split(result, split)}


def quick(data, label="label", **kwargs) -> PrepareConfig:
    kwargs.setdefault("num_workers", 1)
    return PrepareConfig(data=tuple(data) if not isinstance(data, str) else (data,), label=label, **kwargs)


# -- round trips -----------------------------------------------------------------------------------------------
def test_awkward_csv_round_trips_through_the_schema(tmp_path):
    rows = awkward_rows(60)
    path = write_csv(tmp_path / "data.csv", AWKWARD, rows, newline="\r\n")
    result = prepare(quick(path, key_column="id"), str(tmp_path / "out"))

    schema = result.schema
    assert [(f.name, f.key, f.kind) for f in schema.features] == [
        ("bill length (mm)", "f_bill_length_mm", "numeric"),
        ("Île / région", "f_ile_region", "categorical"),
        ("a,b;c!", "f_a_b_c", "categorical"),
        ("größe", "f_grosse", "numeric"),
    ]
    assert schema.label.classes == ("no", "yes")
    examples = all_examples(result)
    assert len(examples) == 60 and sum(result.counts.values()) == 60
    for row in rows:
        ex = examples[row[0]]
        assert ex["bill length (mm)"] == (None if row[1] == "NA" else f32(float(row[1])))
        assert ex["Île / région"] == row[2]
        assert ex["a,b;c!"] == row[3].strip()
        assert ex["größe"] == (None if row[4] == "" else f32(float(row[4])))
        assert ex["label"] == row[5]


def test_jsonl_round_trips_and_parses_with_tensorflow(tmp_path):
    base = [
        {"x": 1.5, "colour": "red", "flag": True, "y": 0},
        {"x": "2.25", "colour": None, "flag": False, "y": 1},
        {"colour": "blue", "y": 1, "extra é": "N/A"},
        {"x": -3, "colour": "red", "flag": True, "y": 0, "extra é": "z"},
    ]
    objs = [dict(base[i % 4], n=i) for i in range(16)] + [base[0]] * 4
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(o, ensure_ascii=False) for o in objs) + "\n\n", encoding="utf-8")
    result = prepare(quick(str(path), label="y", eval_fraction=0.3), str(tmp_path / "out"))

    assert [(f.name, f.kind) for f in result.schema.features] == [
        ("x", "numeric"),
        ("colour", "categorical"),
        ("flag", "categorical"),
        ("n", "numeric"),
        ("extra é", "categorical"),
    ]
    assert result.schema.label.classes == ("0", "1")
    assert result.manifest["rows"] == {"total": 20, "written": 20, "bad": 0, "quarantined": 0}
    decoded = [ex for split in SPLITS for ex in read_split(result, split)]
    expected = {json.dumps(_through_schema(o), sort_keys=True) for o in objs}
    assert {json.dumps({k: v for k, v in ex.items() if k != "__key__"}, sort_keys=True) for ex in decoded} == expected
    # Identical rows get distinct keys (content hash + occurrence) and always share a split.
    keys = [ex["__key__"] for ex in decoded]
    assert len(set(keys)) == 20 and sorted(k.rsplit("-", 1)[1] for k in keys) == ["0"] * 17 + ["1", "2", "3"]
    parsed = tf.io.parse_example(
        [r.numpy() for r in tf.data.TFRecordDataset(tf.io.gfile.glob(result.files("train")))],
        transform.parse_spec(result.schema),
    )
    assert parsed[LABEL_KEY].dtype == tf.int64 and parsed[KEY_FEATURE].shape == (result.counts["train"],)


def _through_schema(o):
    return {
        "x": None if "x" not in o else float(o["x"]),
        "colour": o.get("colour"),
        "flag": None if "flag" not in o else ("true" if o["flag"] else "false"),
        "n": None if "n" not in o else float(o["n"]),
        "extra é": None if o.get("extra é") in (None, "N/A") else o["extra é"],
        "y": str(o["y"]),
    }


def test_fast_encoder_writes_the_example_records_encode_example_builds(tmp_path):
    path = write_csv(tmp_path / "data.csv", AWKWARD, awkward_rows(40))
    result = prepare(quick(path, key_column="id"), str(tmp_path / "out"))
    for split in ("train", "eval"):
        for serialized in records.read_tfrecords(sorted(tf.io.gfile.glob(result.files(split)))):
            row = records.decode_example(serialized, result.schema)
            again = records.encode_example(row, result.schema, row.pop("__key__"))
            assert tf.train.Example.FromString(serialized) == again


def test_columns_whose_safe_keys_collide_get_distinct_keys(tmp_path):
    path = tmp_path / "collide.csv"
    path.write_text("a b,a_b,y\n" + "".join(f"{i},{100 + i},{'xy'[i % 2]}\n" for i in range(30)))
    result = prepare(quick(str(path), label="y"), str(tmp_path / "out"))
    assert [(f.name, f.key) for f in result.schema.features] == [("a b", "f_a_b"), ("a_b", "f_a_b_2")]
    rows = [
        records.decode_example(s, result.schema)
        for s in records.read_tfrecords(tf.io.gfile.glob(result.files("train")))
    ]
    assert all(row["a_b"] == row["a b"] + 100 for row in rows)


def test_default_dataset_prepares_with_exact_counts(tmp_path):
    d = default_dataset()
    assert (d.label, d.task, os.path.basename(d.path)) == ("species", "classification", "penguins.csv")
    assert "CC0" in d.licence and "Horst" in d.source
    result = prepare(quick(d.path, label=d.label, task=d.task), str(tmp_path / "out"))
    assert result.schema.label.classes == ("Adelie", "Chinstrap", "Gentoo")
    assert result.counts == {"train": 257, "eval": 58, "test": 0, "valid": 29}
    assert sum(result.manifest["missing"][split]["sex"] for split in SPLITS) == 11
    assert sum(result.manifest["class_counts"]["train"].values()) == result.counts["train"]
    year = result.schema.feature("year")
    assert (year.kind, year.min, year.max) == ("numeric", 2007.0, 2009.0)
    loaded = load_prepared(str(tmp_path / "out"))
    assert loaded.schema == result.schema and loaded.counts == result.counts and loaded.manifest == result.manifest


def test_prepare_reports_rows_done_and_rate_in_each_pass(tmp_path, caplog):
    """Off a terminal, each pass logs its rows (and the second its share of the total) when it ends."""
    d = default_dataset()
    caplog.set_level(logging.INFO, logger="estimator_lib.progress")
    prepare(quick(d.path, label=d.label, chunk_bytes=4096), str(tmp_path / "out"))
    lines = [r.getMessage() for r in caplog.records if r.name == "estimator_lib.progress"]
    assert re.fullmatch(r"prepare \(pass 1 of 2, reading\): 344 rows, [\d,]+ rows/s", lines[-2])
    assert re.fullmatch(r"prepare \(pass 2 of 2, encoding\): 344/344 rows \(100%\), [\d,]+ rows/s, ETA 0s", lines[-1])


# -- splits and determinism ------------------------------------------------------------------------------------
@pytest.mark.parametrize("key_column", [None, "id"])
def test_split_of_old_rows_is_stable_when_data_doubles(tmp_path, key_column):
    rows = awkward_rows(400)
    small = write_csv(tmp_path / "small.csv", AWKWARD, rows[:200])
    large = write_csv(tmp_path / "large.csv", AWKWARD, rows)
    opts = dict(key_column=key_column, test_fraction=0.1, chunk_bytes=2048)
    first = prepare(quick(small, **opts), str(tmp_path / "a"))
    second = prepare(quick(large, **opts), str(tmp_path / "b"))

    def split_of(result):
        return {ex["__key__"]: s for s in SPLITS for ex in read_split(result, s)}

    before, after = split_of(first), split_of(second)
    assert len(before) == 200 and len(after) == 400
    assert all(after[key] == split for key, split in before.items())
    assert set(before.values()) == {"train", "eval", "test", "valid"}


def test_the_validation_split_is_carved_from_the_training_rows(tmp_path):
    """Changing valid_fraction moves rows between train and valid only: eval and test keep every row."""
    path = write_csv(tmp_path / "data.csv", AWKWARD, awkward_rows(400))
    splits = {}
    for fraction in (0.0, 0.1, 0.25):
        result = prepare(
            quick(path, key_column="id", test_fraction=0.1, valid_fraction=fraction), str(tmp_path / str(fraction))
        )
        splits[fraction] = {s: {ex["__key__"] for ex in read_split(result, s)} for s in SPLITS if result.counts[s]}
    none, some, more = splits[0.0], splits[0.1], splits[0.25]
    assert "valid" not in none and none["train"] == some["train"] | some["valid"] == more["train"] | more["valid"]
    assert none["eval"] == some["eval"] == more["eval"] and none["test"] == some["test"] == more["test"]
    assert some["valid"] < more["valid"] and (len(some["valid"]), len(more["valid"])) == (35, 95)


def test_an_empty_validation_split_is_noted_not_refused(tmp_path):
    path = write_csv(tmp_path / "data.csv", AWKWARD, awkward_rows(12))
    result = prepare(quick(path, key_column="id", valid_fraction=0.01), str(tmp_path / "out"))
    assert result.counts["valid"] == 0
    assert [result.manifest["outputs"][f]["records"] for f in result.manifest["files"]["valid"]] == [0, 0]
    assert result.manifest["notes"][0] == (
        "the valid split is empty (12 good rows, valid_fraction=0.01): training runs its whole budget without "
        "early stopping; add rows or raise valid_fraction"
    )


def test_outputs_are_bitwise_identical_across_runs_and_worker_counts(tmp_path):
    path = write_csv(tmp_path / "data.csv", AWKWARD, awkward_rows(300))
    one = prepare(quick(path, key_column="id", chunk_bytes=1024, num_workers=1), str(tmp_path / "one"))
    two = prepare(quick(path, key_column="id", chunk_bytes=1024, num_workers=2), str(tmp_path / "two"))
    assert one.manifest == two.manifest
    assert tree(tmp_path / "one") == tree(tmp_path / "two")
    assert set(one.manifest["outputs"]) == {
        p for p in tree(tmp_path / "one") if p not in ("manifest.json", "_COMMITTED")
    }


def test_a_rows_shard_comes_from_its_key_hash_in_input_order_and_is_listed_in_the_manifest(tmp_path):
    path = write_csv(tmp_path / "data.csv", AWKWARD, awkward_rows(50))
    result = prepare(quick(path, key_column="id", num_shards=3), str(tmp_path / "out"))
    shards = result.manifest["files"]["train"]
    assert shards == [f"train/part-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert result.manifest["format_version"] == 2
    per_shard = [result.manifest["outputs"][s]["records"] for s in shards]
    assert sum(per_shard) == result.counts["train"] and min(per_shard) > 0
    for k, shard in enumerate(shards):
        stored = records.read_tfrecords([f"{result.output_dir}/{shard}"])
        keys = [records.decode_example(r, result.schema)["__key__"] for r in stored]
        expected = sorted(keys, key=lambda key: int(key[1:]))  # input order: k0, k1, ...
        hashes = np.array([hash64(key) for key in keys], np.uint64)
        assert keys == expected and set(output.shard_of(hashes, 3).tolist()) == {k}


def test_glob_of_several_files_reads_them_in_order(tmp_path):
    rows = awkward_rows(80)
    write_csv(tmp_path / "part-1.csv", AWKWARD, rows[:40])
    write_csv(tmp_path / "part-2.csv", AWKWARD, [])
    write_csv(tmp_path / "part-3.csv", AWKWARD, rows[40:])
    result = prepare(quick(str(tmp_path / "part-*.csv"), key_column="id"), str(tmp_path / "out"))
    assert [(i["name"], i["rows"]) for i in result.manifest["inputs"]] == [
        ("part-1.csv", 40),
        ("part-2.csv", 0),
        ("part-3.csv", 40),
    ]
    assert set(all_examples(result)) == {r[0] for r in rows}


# -- config ----------------------------------------------------------------------------------------------------
def test_config_round_trips_through_json_and_explains_bad_values():
    config = PrepareConfig(data=("a.csv", "gs://b/c/*.jsonl"), label="y", key_column="id", bad_rows="quarantine")
    assert PrepareConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ConfigError, match=r"eval_fraction \+ test_fraction \+ valid_fraction = 1.1 leaves no training"):
        PrepareConfig(data=("a.csv",), label="y", eval_fraction=0.5, test_fraction=0.5)
    with pytest.raises(ConfigError, match=r"bad_rows='drop' must be 'fail' or 'quarantine'"):
        PrepareConfig(data=("a.csv",), label="y", bad_rows="drop")
    with pytest.raises(ConfigError, match=r"key_column='y' is the label"):
        PrepareConfig(data=("a.csv",), label="y", key_column="y")
    with pytest.raises(ConfigError, match=r"unknown field\(s\) \['shards'\]"):
        PrepareConfig.from_dict({"data": ["a.csv"], "label": "y", "shards": 2})


def test_record_boundary_never_cuts_inside_quotes():
    text = 'a,b\n1,"x\ny"\n2,"z'
    assert record_boundary(text, quoted=True) == text.index('"x\ny"') + 5
    assert record_boundary('1,"open\n', quoted=True) == -1
    assert record_boundary("a\nb\nc", quoted=False) == 3


def test_load_prepared_refuses_an_uncommitted_directory(tmp_path):
    (tmp_path / "half").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no complete preparation"):
        load_prepared(str(tmp_path / "half"))
