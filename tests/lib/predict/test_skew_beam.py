"""The skew check on the Beam engine (DirectRunner): the workers' tallies added by the launcher are the in-process
tally, so skew.json is the same bytes and flags the same features; "block" fails before anything is exported or
published. The library on penguin TFRecords, then the batch-predict stage on a tiny model.
"""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

pytest.importorskip("apache_beam")

from penguin_rows import penguin_rows  # noqa: E402
from skew_cases import CATEGORICALS, NUMERICS, PENGUIN_SCHEMA, predict_stage, rows, trained_stage, write_csv  # noqa: E402

from estimator_lib.config.skew import SkewConfig  # noqa: E402
from estimator_lib.config.stages import PredictSpec  # noqa: E402
from estimator_lib.data import distribution, records  # noqa: E402
from estimator_lib.predict import skew, skew_beam  # noqa: E402
from estimator_lib.predict.tally import Bins  # noqa: E402

SCORED = 68  # every fifth row of the shipped table is scored, the other 276 train


def _typed(row):
    out = {n: None if row[n] == "NA" else float(row[n]) for n in NUMERICS}
    out.update({n: None if row[n] == "NA" else row[n] for n in CATEGORICALS})
    return {**out, "species": row["species"]}


def _skewed(rows):
    """Bill lengths in centimetres times 100 (a changed unit), every third island one training never saw, every
    other sex missing."""
    out = []
    for i, row in enumerate(rows):
        row = dict(row)
        row["bill_length_mm"] = None if row["bill_length_mm"] is None else row["bill_length_mm"] * 10
        row["island"] = "Atlantis" if i % 3 == 0 else row["island"]
        row["sex"] = None if i % 2 == 0 else row["sex"]
        out.append(row)
    return out


def _write_records(directory, rows, files: int = 3):
    """`rows` as TFRecords in `files` files (the last one empty, which a worker reads too)."""
    os.makedirs(directory, exist_ok=True)
    cut = -(-len(rows) // (files - 1))
    names = []
    for k in range(files):
        names.append(os.path.join(directory, f"rows-{k}.tfrecord"))
        with tf.io.TFRecordWriter(names[-1]) as writer:
            for i in range(k * cut, min((k + 1) * cut, len(rows))):
                writer.write(records.serialize_example(rows[i], PENGUIN_SCHEMA, key=f"{directory}-{i}"))
    return names


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    """(the training profile, the scored files: held out, skewed), each set 68 rows in three files."""
    work = tmp_path_factory.mktemp("skew-beam")
    rows = [_typed(r) for r in penguin_rows()]
    train, scored = [r for i, r in enumerate(rows) if i % 5 != 4], rows[4::5]
    training = distribution.profile_split(_write_records(str(work / "train"), train), PENGUIN_SCHEMA, len(train))
    held_out = _write_records(str(work / "held-out"), scored)
    skewed = _write_records(str(work / "skewed"), _skewed(scored))
    return training, {"held-out": held_out, "skewed": skewed}


@pytest.mark.determinism
@pytest.mark.parametrize("rows", ["held-out", "skewed"])
def test_the_workers_tally_is_the_in_process_tally(penguins, rows):
    bins = Bins.of(penguins[0], PENGUIN_SCHEMA)
    here, there = bins.tally(penguins[1][rows]), skew_beam.tally_on_beam(bins, penguins[1][rows])
    assert here.rows == there.rows == SCORED
    assert [c.tolist() for c in there.counts] == [c.tolist() for c in here.counts]
    island = bins.scored(here)["features"]["island"]
    assert island["present"] + island["missing"] == SCORED


@pytest.mark.determinism
@pytest.mark.parametrize(
    "rows, flagged",
    [("held-out", []), ("skewed", ["bill_length_mm", "island", "sex"])],
)
def test_skew_json_is_the_same_bytes_and_flags_the_same_features_on_both_engines(penguins, tmp_path, rows, flagged):
    training, scored = penguins
    check = skew.SkewCheck(training, SkewConfig())
    here = check.start(scored[rows], PENGUIN_SCHEMA, SCORED).result()  # counted in a thread
    there = skew_beam.start(check, scored[rows], PENGUIN_SCHEMA, SCORED).result()
    a, b = skew.write_report(here, str(tmp_path / "inprocess")), skew.write_report(there, str(tmp_path / "beam"))
    with open(a, "rb") as f, open(b, "rb") as g:
        assert f.read() == g.read()
    assert [f.feature for f in there.flagged] == flagged
    assert there.status == ("warned" if flagged else "passed")


def test_block_on_beam_raises_the_in_process_error(penguins):
    training, scored = penguins
    check = skew.SkewCheck(training, SkewConfig(skew="block"))
    with pytest.raises(skew.SkewError) as here:
        check.start(scored["skewed"], PENGUIN_SCHEMA, SCORED)  # judged at once: before any row is scored
    with pytest.raises(skew.SkewError) as there:
        skew_beam.start(check, scored["skewed"], PENGUIN_SCHEMA, SCORED)
    assert str(there.value) == str(here.value)
    assert str(there.value).startswith("skew check blocked: 3 of 7 features skewed: `bill_length_mm`: ")


def test_off_and_a_model_without_a_profile_run_no_pipeline(penguins):
    missing = ["/nonexistent/rows.tfrecord"]  # a pipeline would fail reading it
    assert skew_beam.start(skew.SkewCheck(penguins[0], SkewConfig(skew="off")), missing, PENGUIN_SCHEMA, 3) is None
    report = skew_beam.start(skew.SkewCheck(None, SkewConfig(skew="block")), missing, PENGUIN_SCHEMA, 3).result()
    assert report.status == skew.SKIPPED


def test_a_wrong_row_count_is_named(penguins):
    check = skew.SkewCheck(penguins[0], SkewConfig())
    with pytest.raises(ValueError, match="the files hold 68 records, not the 69 expected"):
        skew_beam.start(check, penguins[1]["held-out"], PENGUIN_SCHEMA, 69)
    with pytest.raises(ValueError, match="the files hold 68 records, not the 69 expected"):
        check.start(penguins[1]["held-out"], PENGUIN_SCHEMA, 69).result()


# -- the batch-predict stage ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A linear model trained 10 steps on 200 rows, and 40 rows to score, a new colour at two thirds of them."""
    work, dataset, model, blessing = trained_stage(tmp_path_factory.mktemp("stage"))
    return work, dataset, model, blessing, write_csv(str(work / "new.csv"), rows(40, ("red", "purple", "purple")))


def _predict(trained, name: str, spec: PredictSpec):
    return predict_stage(*trained[:4], name, spec)


@pytest.mark.determinism
def test_the_stage_on_beam_writes_the_in_process_skew_json_and_metadata(trained):
    here = _predict(trained, "inprocess", PredictSpec(trained[4]))
    there = _predict(trained, "beam", PredictSpec(trained[4], engine="beam"))
    with open(os.path.join(here.uri, "skew.json"), "rb") as f, open(os.path.join(there.uri, "skew.json"), "rb") as g:
        assert f.read() == g.read()
    assert there.metadata["skew"] == here.metadata["skew"]
    assert there.metadata["skew"]["status"] == "warned" and there.metadata["count"] == 40
    assert [w["feature"] for w in there.metadata["skew"]["worst"]] == ["colour"]


def test_block_on_beam_fails_the_stage_before_anything_is_exported_or_published(trained):
    spec = PredictSpec(trained[4], engine="beam", skew=SkewConfig(skew="block"))
    with pytest.raises(skew.SkewError, match=r"blocked: 1 of 2 features skewed: `colour`: 65% .*No prediction"):
        _predict(trained, "blocked", spec)
    out = os.path.join(str(trained[0]), "blocked", "blocked")
    assert not os.path.exists(out) and not os.path.exists(out + "-saved_model")
