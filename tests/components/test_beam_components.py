"""The prepare and batch predict components with engine="beam" (DirectRunner), through their Python
functions: the prepared dataset is the in-process one byte for byte; batch prediction exports the CPU
SavedModel and scores every row with it, within 1e-5 of the checkpoint's predictions, for split and raw rows."""

from __future__ import annotations

import os

import numpy as np
import pytest
from kfp.dsl import Dataset, Markdown, Model

pytest.importorskip("apache_beam")

from file_trees import tree  # noqa: E402
from test_components import CPU, FIRST_RUN, TRAIN, artifact, evaluated, write_csv  # noqa: E402

from components.batch_predict import batch_predict  # noqa: E402
from components.prepare import prepare_data  # noqa: E402
from components.train import train_model  # noqa: E402
from estimator_lib.config import PrepareConfig  # noqa: E402
from estimator_lib.config.beam import BeamConfig  # noqa: E402
from estimator_lib.config.stages import PredictSpec, PrepareSpec  # noqa: E402
from estimator_lib.predict import read_predictions  # noqa: E402

BEAM = BeamConfig(runner="DirectRunner")


def prepared(work, engine: str, data: str) -> Dataset:
    """`data` prepared by the prepare component with `engine`, in many chunks (so Beam has work to spread)."""
    dataset = artifact(Dataset, work, f"dataset-{engine}")
    config = PrepareConfig(
        data=(data,), label="label", eval_fraction=0.25, num_workers=1, num_shards=2, chunk_bytes=2048
    )
    prepare_data(
        spec=PrepareSpec(config, engine=engine, beam=BEAM).to_json(indent=None),
        **FIRST_RUN,
        dataset=dataset,
        validation=artifact(Markdown, work, "validation", f"dataset-{engine}"),
    )
    return dataset


def train(dataset: Dataset, work) -> Model:
    model = artifact(Model, work, "model")
    train_model(dataset=dataset, **TRAIN, publish_root=str(work / "published"), model=model)
    return model


@pytest.mark.slow
def test_prepare_and_batch_predict_components_on_beam(tmp_path):
    data = write_csv(str(tmp_path / "data.csv"))
    here, there = prepared(tmp_path, "inprocess", data), prepared(tmp_path, "beam", data)
    assert tree(there.uri) == tree(here.uri)
    assert there.metadata["fingerprint"] == here.metadata["fingerprint"]

    model = train(there, tmp_path)
    predicted = evaluated(tmp_path, there, model, beat_trivial=False)["eval_predictions"]
    for data_arg in ("eval", data):  # a prepared split, and raw CSV rows (encoded on Beam first)
        checkpoint = artifact(Dataset, tmp_path, f"checkpoint-{len(data_arg)}")
        spec = PredictSpec(data=data_arg).to_json(indent=None)
        batch_predict(
            dataset=there, model=model, spec=spec, tpu=CPU, eval_predictions=predicted, predictions=checkpoint
        )
        scored = artifact(Dataset, tmp_path, f"beam-{len(data_arg)}")
        on_beam = PredictSpec(data=data_arg, engine="beam", beam=BEAM).to_json(indent=None)
        batch_predict(dataset=there, model=model, spec=on_beam, tpu=CPU, eval_predictions=predicted, predictions=scored)

        want, got = read_predictions(checkpoint.uri), read_predictions(scored.uri)
        assert [r["key"] for r in got] == [r["key"] for r in want] and len(got) == checkpoint.metadata["count"]
        origins = [[(r["key"], r["file"], r["line"]) for r in rows] for rows in (want, got)]
        assert origins[1] == origins[0] and {name for _, name, _ in origins[0]} == {"data.csv"}
        probs = [[[r["probabilities"][c] for c in ("no", "yes")] for r in rows] for rows in (want, got)]
        np.testing.assert_allclose(np.array(probs[1]), np.array(probs[0]), atol=1e-5)
        assert scored.metadata["manifest"]["source"]["kind"] == "saved_model"
        assert os.path.exists(os.path.join(scored.uri + "-saved_model"))
    assert scored.metadata["scored_rows_uri"] == scored.uri + "-rows"
