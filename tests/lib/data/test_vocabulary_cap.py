"""`prepare.max_vocabulary_size` cutting a categorical column's vocabulary is a recorded warning with its counts:
in the prepared manifest (`vocabulary_caps`, `notes`), the console's data lines, `show`, and the evaluation
report's Data section. Real preparations of a tiny CSV whose `city` column holds 60 distinct values."""

from __future__ import annotations

import collections
import csv
import json
import os

import tensorflow as tf
from kfp.dsl import Dataset
from markup_checks import parse_html

from estimator_lib.config import PrepareConfig
from estimator_lib.data.combine import NumericStats
from estimator_lib.data.encode import ChunkResult
from estimator_lib.data.plan import Decisions
from estimator_lib.data.prepare import prepare
from estimator_lib.data.stats import Totals, build_schema, cap_note, vocabulary_caps
from estimator_lib.evaluation import report as report_lib
from estimator_lib.evaluation.blessing import Blessing
from estimator_lib.schema import CATEGORICAL, FeatureSpec
from pipelines import cli, runs
from pipelines.local.summary import data_summary
from pipelines.run_summary import Data, RunSummary
from pipelines.show import data_lines

CITY_NOTE = (
    "column 'city': vocabulary capped: 60 distinct values in the training split, the 10 most frequent kept "
    "(prepare.max_vocabulary_size=10); 142 of 218 training rows (65.1%) hold a value left out, which the model "
    "sees as out-of-vocabulary, like a missing value. Raise prepare.max_vocabulary_size to keep more "
    "(docs/prepare.md)"
)


def write_cities(path, rows: int = 300) -> str:
    """`city` holds c00..c59, every 7th row one of c00..c04 (so those five lead), a few missing; `x` 11 numbers."""
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["city", "x", "label"])
        for i in range(rows):
            city = "" if i % 50 == 49 else (f"c{i % 60:02d}" if i % 7 else f"c{i % 5:02d}")
            writer.writerow([city, i % 11, i % 2])
    return str(path)


def training_cities(prepared) -> collections.Counter:
    """{city or None (missing): training rows}, read from the training shards' Examples."""
    key = prepared.schema.features[0].key
    found: collections.Counter = collections.Counter()
    for record in tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(prepared.files("train")))):
        values = tf.train.Example.FromString(record.numpy()).features.feature[key].bytes_list.value
        found[values[0].decode("utf-8") if values else None] += 1
    return found


def config(path: str, **changes) -> PrepareConfig:
    return PrepareConfig(**{"data": (path,), "label": "label", "num_workers": 1, "max_vocabulary_size": 10, **changes})


def test_a_capped_vocabulary_is_recorded_with_its_counts(tmp_path):
    prepared = prepare(config(write_cities(tmp_path / "cities.csv")), str(tmp_path / "prepared"))
    city = prepared.schema.features[0]
    assert city.vocabulary == ("c02", "c01", "c04", "c03", "c00", "c18", "c50", "c06", "c15", "c16")
    written = training_cities(prepared)  # counted again from the training shards
    assert (sum(written.values()), written[None], len(written) - 1) == (218, 6, 60)
    assert sum(n for value, n in written.items() if value is not None and value not in city.vocabulary) == 142
    assert prepared.manifest["vocabulary_caps"] == [
        {
            "column": "city",
            "distinct": 60,
            "distinct_exact": True,
            "kept": 10,
            "max_vocabulary_size": 10,
            "rows": 218,
            "rows_outside": 142,
            "share_outside": 0.651376,
        }
    ]
    assert prepared.manifest["notes"] == [CITY_NOTE]


def test_a_vocabulary_within_the_cap_is_no_warning(tmp_path):
    prepared = prepare(
        config(write_cities(tmp_path / "cities.csv"), max_vocabulary_size=60), str(tmp_path / "prepared")
    )
    assert len(prepared.schema.features[0].vocabulary) == 60
    assert prepared.manifest["vocabulary_caps"] == [] and prepared.manifest["notes"] == []


def test_a_vocabulary_a_schema_gives_is_never_capped(tmp_path):
    path = write_cities(tmp_path / "cities.csv")
    first = prepare(config(path, max_vocabulary_size=3), str(tmp_path / "first"))
    assert first.manifest["vocabulary_caps"][0]["kept"] == 3
    again = prepare(
        config(path, max_vocabulary_size=3, schema_uri=str(tmp_path / "first" / "schema.json")), str(tmp_path / "again")
    )
    assert again.schema.features[0].vocabulary == ("c02", "c01", "c04")  # the given one, kept whole
    assert again.manifest["vocabulary_caps"] == [] and again.manifest["notes"] == []


def test_continuing_a_reference_counts_its_known_values_against_the_cap(tmp_path):
    path = write_cities(tmp_path / "cities.csv")
    reference = prepare(config(path, max_vocabulary_size=4), str(tmp_path / "reference")).schema
    continued = prepare(config(path, max_vocabulary_size=6), str(tmp_path / "continued"), reference=reference)
    assert reference.features[0].vocabulary == ("c02", "c01", "c04", "c03")
    assert continued.schema.features[0].vocabulary == ("c02", "c01", "c04", "c03", "c00", "c18")
    cap = continued.manifest["vocabulary_caps"][0]
    assert (cap["distinct"], cap["kept"], cap["rows_outside"]) == (60, 6, 159)


# -- beyond the counters' bound: the distinct count is a floor ----------------------------------------------------
def _chunk(cities) -> ChunkResult:
    """A pass-2 result of training rows holding `cities` (feature 0, categorical), every row labelled 0."""
    return ChunkResult(
        rows=len(cities),
        examples=([b"x"] * len(cities), [], [], []),
        missing=[[0], [0], [0], [0]],
        numeric={},
        categories={0: collections.Counter(cities)},
        class_counts=[collections.Counter({0: len(cities)}), collections.Counter(), collections.Counter(), {}],
        label_moments=NumericStats(),
        labelled=len(cities),
    )


def test_past_the_counters_bound_the_distinct_count_is_a_floor_and_the_rows_an_estimate():
    totals = Totals(num_features=1, max_categories=4)
    for cities in (["a", "a", "a", "b", "b", "c"], ["d", "e", "a"], ["f", "g", "h", "b"]):
        totals.add(_chunk(cities))
    # The second merge held a..e (5 > 4) and kept a, b; the third held a, b, f, g, h (5) and kept a, b again:
    # 8 values were seen, the counters can vouch for 5.
    assert totals.distinct_floor == {0: 5} and totals.categories[0] == collections.Counter({"a": 4, "b": 3})
    features = (FeatureSpec("city", "f_city", CATEGORICAL, value_type="string"),)
    decisions = Decisions(features, "classification", ("0", "1"), False, (), None, None)
    prepare_config = PrepareConfig(data=("in.csv",), label="label", max_vocabulary_size=2)
    schema = build_schema(decisions, totals, prepare_config)
    assert schema.features[0].vocabulary == ("a", "b")
    caps = vocabulary_caps(decisions, schema, totals, prepare_config)
    assert caps == [
        {
            "column": "city",
            "distinct": 5,
            "distinct_exact": False,
            "kept": 2,
            "max_vocabulary_size": 2,
            "rows": 13,
            "rows_outside": 6,
            "share_outside": 0.461538,
        }
    ]
    assert cap_note(caps[0]).startswith(
        "column 'city': vocabulary capped: at least 5 distinct values in the training split, the 2 most frequent "
        "kept (prepare.max_vocabulary_size=2); about 6 of 13 training rows (46.2%) hold a value left out"
    )


# -- where a user sees it ----------------------------------------------------------------------------------------
def test_the_warning_reaches_the_console_show_and_the_report(tmp_path, capsys):
    prepared = prepare(config(write_cities(tmp_path / "cities.csv")), str(tmp_path / "prepared"))
    dataset = Dataset(uri=prepared.output_dir, metadata={"manifest_uri": str(tmp_path / "prepared" / "manifest.json")})
    data = data_summary(dataset)  # what run-local records in summary.json
    assert data["notes"] == [CITY_NOTE]
    assert data_lines(Data(**data)) == ["  data: 300 rows (train 218, eval 46, valid 36)", f"  warning: {CITY_NOTE}"]

    folder = runs.RunFolder(str(tmp_path / "out"), "20261125T100000Z-cccccc")
    folder.create()
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "pipelines", "recorded_summary.json")) as f:
        recorded = json.load(f)  # a real run's summary, here with this data, failed after it got to the end
    run = {"id": folder.run_id, "dir": folder.path, "log": folder.log, "started": "2026-11-25", "attempts": 1}
    summary = {**recorded, "status": "failed", "stage": "train", "error": "stopped", "data": data, "run": run}
    runs.publish_summary(folder, RunSummary.from_dict(summary))
    assert cli.main(["show", "--output", str(tmp_path / "out")]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[2:4] == ["  data: 300 rows (train 218, eval 46, valid 36)", f"  warning: {CITY_NOTE}"]

    blessing = Blessing(True, (), {"accuracy": 0.9}, "accuracy", 52)
    inputs = report_lib.ReportInputs("label", blessing, None, None, manifest=prepared.manifest)
    document = report_lib.render_html(inputs)
    assert CITY_NOTE in parse_html(document).text
    assert (
        "<h3>Vocabularies capped (prepare.max_vocabulary_size)</h3><table><tr><th>column</th><th>distinct values</th>"
        "<th>kept</th><th>training rows left out</th><th>share left out</th></tr><tr><td>city</td>"
        '<td class="n">60</td><td class="n">10</td><td>142 of 218</td><td>65.1%</td></tr></table>'
    ) in document
