"""What batch prediction scores: a prepared split, prepared TFRecords, or raw CSV / JSON Lines rows, chosen
from the text the user gave (`config.run.prediction_kind`), and the one call that scores any of them."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional

from estimator_lib import storage
from estimator_lib.config import JobConfig
from estimator_lib.config.run import DIRECTORY, RAW, RAW_EXTENSIONS, SPLIT, TFRECORD_EXTENSIONS, prediction_kind
from estimator_lib.config.skew import DEFAULT_SKEW, SkewConfig
from estimator_lib.data import records
from estimator_lib.data.prepare import PrepareResult
from estimator_lib.model.inputs import resolve_files
from estimator_lib.predict.batch import batch_predict, predict_raw
from estimator_lib.predict.origins import KeyedOrigins, prepared_origins
from estimator_lib.predict.shards import PredictResult
from estimator_lib.predict.skew import SkewCheck


@dataclasses.dataclass(frozen=True)
class PredictionSource:
    """What batch prediction scores.

    Attributes:
      uri: TFRecord file pattern(s), or CSV / JSON Lines file pattern(s) when `raw`.
      raw: rows to encode through the prepared schema first (`predict_raw`).
      count: records in `uri` when known (a prepared split's manifest count); None counts them.
      split: the prepared split `uri` holds ("eval", "train", "test"), whose rows are placed in the input by
        key (`split_origins`); None for other rows.
    """

    uri: str
    raw: bool = False
    count: Optional[int] = None
    split: Optional[str] = None


def prediction_source(data: str, prepared: PrepareResult) -> PredictionSource:
    """The rows `data` names: a prepared split's TFRecords with the manifest's count, raw CSV / JSON Lines
    rows (scored through the prepared schema), TFRecords as given, or a directory's TFRecords."""
    kind = prediction_kind(data)
    if kind == SPLIT:
        return PredictionSource(prepared.files(data), count=prepared.counts[data], split=data)
    if kind == RAW:
        return PredictionSource(data, raw=True)
    uri = _directory_tfrecords(data) if kind == DIRECTORY else data
    files = resolve_files(uri)
    with records.named_data_loss(files):  # a truncated file fails here first: name it
        records.check_features(files, prepared.schema)  # TFRecords made elsewhere: same schema?
    return PredictionSource(uri)


def _directory_tfrecords(directory: str) -> str:
    for ext in TFRECORD_EXTENSIONS:
        pattern = storage.join(directory.rstrip("/"), "*" + ext)
        if storage.glob(pattern):
            return pattern
    raise FileNotFoundError(
        f"predict_data={directory!r} names no file type and holds no {' or '.join(TFRECORD_EXTENSIONS)} files; "
        f"give CSV / JSON Lines files ({', '.join(RAW_EXTENSIONS)}), TFRecord files, or a directory of TFRecords"
    )


def split_origins(source: PredictionSource, prepared: PrepareResult) -> Optional[KeyedOrigins]:
    """A prepared split's rows' input files and lines (by key, in the preparation's places); None for other
    sources: TFRecords are placed by file and record index, raw rows once encoded."""
    if source.split is None:
        return None
    key_column = prepared.schema.key_column is not None
    return prepared_origins(prepared.output_dir, prepared.manifest, key_column, source.split)


def scoring_options(prepared: PrepareResult) -> Dict[str, Any]:
    """The preparation's row rules, so new rows are read as the training rows were: missing-value tokens,
    bad-row policy and its limit (from the prepared manifest's config)."""
    config = prepared.manifest["config"]
    return {
        "missing_values": tuple(config["missing_values"]),
        "bad_rows": config["bad_rows"],
        "max_bad_fraction": config["max_bad_fraction"],
    }


def encoded_rows_uri(predictions_uri: str) -> str:
    """Where raw rows are encoded for scoring and kept (manifest, quarantine): beside the predictions,
    because publishing the predictions replaces their directory."""
    return predictions_uri.rstrip("/") + "-rows"


def score(
    job: JobConfig,
    prepared: PrepareResult,
    model_dir: str,
    data: str,
    output_dir: str,
    skew: SkewConfig = DEFAULT_SKEW,
    predicted: Optional[Mapping[str, Any]] = None,
) -> PredictResult:
    """Batch-predicts what `data` names with the checkpoint in `model_dir` and commits it at `output_dir`.

    Args:
      job: the trained model's job config, placed for this stage.
      prepared: the preparation the model was trained on (its schema; its splits when `data` names one).
      model_dir: the estimator's model directory.
      data: "eval", "train" or "test"; a URI or glob of CSV / JSON Lines rows (label optional), encoded
        through the prepared schema with the preparation's row rules; or prepared TFRecords (files, or a
        directory of them).
      output_dir: where the JSON Lines shards and manifest are committed.
      skew: the skew check of the rows against the preparation's training profile (skew.json beside them).
      predicted: the eval rows' prediction profile the model was blessed on (`Blessing.eval_predictions`): the
        predictions are compared with it too; None compares the rows only.
    """
    source = prediction_source(data, prepared)
    check = SkewCheck(prepared.profile(), skew, predicted)
    if source.raw:
        return predict_raw(
            job,
            prepared.schema,
            model_dir,
            source.uri,
            output_dir,
            staging_dir=encoded_rows_uri(output_dir),
            skew=check,
            **scoring_options(prepared),
        )
    return batch_predict(
        job,
        prepared.schema,
        model_dir,
        source.uri,
        output_dir,
        num_examples=source.count,
        origins=split_origins(source, prepared),
        skew=check,
    )
