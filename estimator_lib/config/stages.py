"""One frozen spec per pipeline stage: what the stage is given, cut from the run's resolved `RunConfig`.

A stage receives its spec as one parameter (`to_json()`, decoded by `from_json`, which checks every value
against its declared type: an int arrives as an int) and records it beside its outputs; later stages,
`reproduce` and `diff` read that record instead of merging settings again. `RunConfig.stage_specs()` is the
only place the specs are made. TensorFlow-free, like every config.

- `PrepareSpec`: the prepare stage (rows -> TFRecords, validated against the reference model's data).
- `TrainSpec`: the train stage; its job config is recorded beside the checkpoints, and evaluate, batch predict
  and export read it there.
- `EvaluateSpec`: the evaluate stage's blessing rules and baseline.
- `PredictSpec`: the batch-predict stage's rows, engine and skew check.
- `StageLimits`: how long a local run's stage may go without output, and may run at all (run-local's flags).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from estimator_lib.config.base import JsonConfig, require
from estimator_lib.config.beam import INPROCESS, BeamConfig, check_engine
from estimator_lib.config.blessing import BlessingConfig
from estimator_lib.config.job import JobConfig
from estimator_lib.config.prepare import PrepareConfig
from estimator_lib.config.skew import SkewConfig
from estimator_lib.config.validation import ValidationConfig

# Files the stages write inside their artifacts, named once (the describers and `reproduce` fingerprint them).
SLICES_FILE = "slices.json"  # inside the Blessing: every slice's metrics and rows
IMPORTANCE_FILE = "importance.json"  # inside the Blessing: every feature's importance and attribution
SERVING_CHECK_FILE = "serving_check.json"  # the serving check's record, in its stage's output
SKEW_FILE = "skew.json"  # beside the predictions: the scored rows against the training data
STAGE_TIMEOUT_FLAG = "--stage-timeout"  # run-local's flag that sets `StageLimits.timeout_minutes`


@dataclasses.dataclass(frozen=True)
class PrepareSpec(JsonConfig):
    """The prepare stage's spec.

    Attributes:
      prepare: what to prepare and how; its data as the run gave it ("embedded:penguins" is located by the
        stage).
      validation: how far the data may drift from the reference model's.
      engine: "inprocess" or "beam".
      beam: where Beam runs, with engine="beam".
    """

    prepare: PrepareConfig
    validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
    engine: str = INPROCESS
    beam: BeamConfig = dataclasses.field(default_factory=BeamConfig)

    def __post_init__(self) -> None:
        check_engine(self.engine)


@dataclasses.dataclass(frozen=True)
class TrainSpec(JsonConfig):
    """The train stage's spec: the job config (its `tpu` section is the run's; the pipeline places the stage)."""

    job: JobConfig = dataclasses.field(default_factory=JobConfig)


@dataclasses.dataclass(frozen=True)
class EvaluateSpec(JsonConfig):
    """The evaluate stage's spec: the blessing rules (the baseline is resolved by the resolve stage)."""

    blessing: BlessingConfig = dataclasses.field(default_factory=BlessingConfig)


@dataclasses.dataclass(frozen=True)
class PredictSpec(JsonConfig):
    """The batch-predict stage's spec: the rows to score (a prepared split or a URI), the engine, and the skew
    check of those rows against the training data (`predict.*`)."""

    data: str = "eval"
    engine: str = INPROCESS
    beam: BeamConfig = dataclasses.field(default_factory=BeamConfig)
    skew: SkewConfig = dataclasses.field(default_factory=SkewConfig)

    def __post_init__(self) -> None:
        check_engine(self.engine)


@dataclasses.dataclass(frozen=True)
class StageSpecs:
    """Every stage's spec, by stage."""

    prepare: PrepareSpec
    train: TrainSpec
    evaluate: EvaluateSpec
    batch_predict: PredictSpec


@dataclasses.dataclass(frozen=True)
class StageLimits(JsonConfig):
    """How long a local run's stage may go on (`pipelines.local.kfp_patches.run_stage`).

    Attributes:
      quiet_minutes: a line warns when the stage has printed nothing for this long (a hung model_fn, say).
      timeout_minutes: the stage is stopped and fails after this long; None: no limit.
    """

    quiet_minutes: float = 10.0
    timeout_minutes: Optional[float] = None

    def __post_init__(self) -> None:
        for name in ("quiet_minutes", "timeout_minutes"):
            value = getattr(self, name)
            require(value is None or value > 0, f"{name}={value!r} must be a positive number of minutes")
