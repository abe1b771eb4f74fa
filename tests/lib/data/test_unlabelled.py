"""Rows without a label: set aside (in no split, not bad), counted and placed in the manifest, their cells kept in
unlabelled.jsonl for scoring; the labelled rows prepare exactly as they would without them. A label that is
present but wrong stays a bad row."""

from __future__ import annotations

import csv
import json

import pytest
from file_trees import tree

from estimator_lib.data.embedded import default_dataset
from estimator_lib.data.prepare import DataError, PrepareConfig, encode_for_scoring, prepare

BLANKED = [3, 40, 77, 100, 150, 200, 250, 300]  # data rows (0-based) of penguins.csv whose label goes


def penguins():
    d = default_dataset()
    with open(d.path, newline="", encoding="utf-8") as f:
        header, *rows = list(csv.reader(f))
    return d.label, header, rows


def write(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows([header] + rows)
    return str(path)


def blanked(tmp_path):
    """(label, the penguins with 8 labels blanked ("" and NA), the same without those rows, the blanked rows)."""
    label, header, rows = penguins()
    column = header.index(label)
    for n, i in enumerate(BLANKED):
        rows[i][column] = "" if n % 2 else "NA"
    kept = [r for i, r in enumerate(rows) if i not in BLANKED]
    with_them = write(tmp_path / "data.csv", header, rows)
    without = write(tmp_path / "labelled.csv", header, kept)
    return label, with_them, without, [dict(zip(header, rows[i])) for i in BLANKED]


def test_unlabelled_rows_are_set_aside_counted_placed_and_kept_for_scoring(tmp_path):
    label, path, _, cells = blanked(tmp_path)
    result = prepare(PrepareConfig(data=(path,), label=label, num_workers=1), str(tmp_path / "out"))

    rows = result.manifest["rows"]
    assert rows == {"total": 344, "written": 336, "bad": 0, "quarantined": 0, "unlabelled": 8}
    assert sum(result.counts.values()) == 336
    lines = [i + 2 for i in BLANKED]  # the header is line 1
    assert result.manifest["unlabelled_lines"] == {"data.csv": lines}
    assert result.manifest["notes"][0] == (
        f"8 row(s) have no label (data.csv lines {', '.join(map(str, lines))}): set aside, neither trained on nor "
        "evaluated; unlabelled.jsonl in the prepared dataset holds them, to score with --predict-data "
        "(docs/prepare.md)"
    )
    with open(tmp_path / "out" / "unlabelled.jsonl", encoding="utf-8") as f:
        assert [json.loads(line) for line in f] == cells
    assert "unlabelled.jsonl" in result.manifest["outputs"]


def test_labelled_rows_prepare_byte_for_byte_as_without_the_unlabelled_rows(tmp_path):
    label, with_them, without, _ = blanked(tmp_path)
    config = PrepareConfig(data=(with_them,), label=label, chunk_bytes=2048, num_shards=3)
    prepare(config, str(tmp_path / "with"))
    prepare(PrepareConfig(data=(without,), label=label, chunk_bytes=2048, num_shards=3), str(tmp_path / "without"))
    here, there = tree(str(tmp_path / "with")), tree(str(tmp_path / "without"))
    shards = sorted(name for name in there if name.endswith(".tfrecord"))
    assert shards and all(here[name] == there[name] for name in shards)  # every labelled row in its split and shard
    for name in ("schema.json", "profile.json"):
        assert here[name] == there[name]
    assert set(here) - set(there) == {"unlabelled.jsonl"}


def test_data_with_every_label_keeps_its_manifest_keys_and_files(tmp_path):
    label, _, without, _ = blanked(tmp_path)
    result = prepare(PrepareConfig(data=(without,), label=label), str(tmp_path / "out"))
    assert result.manifest["rows"] == {"total": 336, "written": 336, "bad": 0, "quarantined": 0}
    assert "unlabelled_lines" not in result.manifest and not (tmp_path / "out" / "unlabelled.jsonl").exists()
    assert not any(note.startswith("8 row(s)") for note in result.manifest["notes"])


def test_the_unlabelled_rows_score_as_they_are(tmp_path):
    label, path, _, _ = blanked(tmp_path)
    result = prepare(PrepareConfig(data=(path,), label=label), str(tmp_path / "out"))
    scored = encode_for_scoring(str(tmp_path / "out" / "unlabelled.jsonl"), result.schema, str(tmp_path / "scored"))
    assert scored.count == 8 and scored.manifest["rows"]["labelled"] == 0 and scored.manifest["rows"]["bad"] == 0


def test_json_lines_null_or_absent_label_is_unlabelled_and_lines_are_listed_per_file(tmp_path):
    rows = [{"x": i % 7, "y": ["a", "b"][i % 2]} for i in range(60)]
    rows[4]["y"] = None
    del rows[9]["y"]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:30]))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[30:]))
    result = prepare(PrepareConfig(data=(str(tmp_path / "*.jsonl"),), label="y"), str(tmp_path / "out"))
    assert result.manifest["rows"]["unlabelled"] == 2
    assert result.manifest["unlabelled_lines"] == {"a.jsonl": [5, 10]}


def test_only_the_first_lines_of_a_file_are_listed(tmp_path):
    label, header, rows = penguins()
    for row in rows[:12]:
        row[header.index(label)] = ""
    path = write(tmp_path / "data.csv", header, rows)
    result = prepare(PrepareConfig(data=(path,), label=label), str(tmp_path / "out"))
    assert result.manifest["rows"]["unlabelled"] == 12
    assert result.manifest["unlabelled_lines"] == {"data.csv": list(range(2, 12))}
    assert "(data.csv lines 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...): set aside" in result.manifest["notes"][0]


def test_a_present_but_wrong_label_is_still_a_bad_row(tmp_path):
    header = ["x", "y"]
    rows = [[str(i % 9), str(i * 0.5)] for i in range(50)]
    rows[6][1] = "abc"
    rows[7][1] = ""  # unlabelled: set aside, no failure
    path = write(tmp_path / "data.csv", header, rows)
    with pytest.raises(DataError, match=r"^data\.csv line 8, column 'y': 'abc' is not a number \(the label is numeric"):
        prepare(PrepareConfig(data=(path,), label="y", task="regression"), str(tmp_path / "out"))
