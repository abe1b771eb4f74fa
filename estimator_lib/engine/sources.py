"""The two sources of a model the stages run: the built-in families on prepared rows (their schema, the library's
model_fn and metric_fn) and a user's model_fn on their prepared TFRecords (their feature spec). Each stage
makes one call on the source its dataset holds (`open_dataset`), so the components never ask which it is.

Every method runs in the stage's own process; the user's code is imported there (`engine.user.stages`), and on
the Beam workers that batch-predict it (`engine.user.beam`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from estimator_lib import estimator, release, storage
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig
from estimator_lib.config.beam import BEAM, BeamConfig
from estimator_lib.config.blessing import check_task_metrics
from estimator_lib.config.skew import DEFAULT_SKEW, SkewConfig
from estimator_lib.config.stages import PrepareSpec
from estimator_lib.data import prepare as rows
from estimator_lib.data import retrain
from estimator_lib.data.output import SCHEMA
from estimator_lib.data.validation import ValidationReport
from estimator_lib.engine.user import run as user_run
from estimator_lib.engine.user import stages as user_stages
from estimator_lib.evaluation import evaluate_and_bless
from estimator_lib.evaluation import report as report_lib
from estimator_lib.evaluation.evaluate import Evaluation
from estimator_lib.export import ExportResult
from estimator_lib.model.user import package
from estimator_lib.model.user import prepare as user_prepare
from estimator_lib.predict import PredictResult, score
from estimator_lib.predict.sources import scoring_options

USER_TASK = "user model_fn"


def beam_passes(engine: str, beam: BeamConfig) -> Any:
    """Who runs a stage's passes: Apache Beam (imported only for this engine: about 1 s) or this host."""
    if engine != BEAM:
        return contextlib.nullcontext()
    from estimator_lib.data import beam as beam_data  # Apache Beam takes about 1 s to import

    return beam_data.beam_passes(beam)


@dataclasses.dataclass(frozen=True)
class Rows:
    """The built-in families on a preparation of CSV / JSON Lines rows (`data.prepare`)."""

    prepared: rows.PrepareResult

    @property
    def manifest(self) -> Dict[str, Any]:
        return self.prepared.manifest

    def facts(self) -> Dict[str, Any]:
        """What the Dataset artifact records of it: counts, schema file, label, task, classes."""
        label = self.prepared.schema.label
        counts = dict(self.prepared.counts)
        return {
            "counts": counts,
            "schema_file": SCHEMA,
            "label": label.name,
            "task": label.task,
            "classes": list(label.classes),
        }

    def for_data(self, job: JobConfig) -> JobConfig:
        """`job` with its settings that follow the data set from the train split and the model's features."""
        features = self.prepared.schema.select(job.model.features).features
        return job.for_data(self.prepared.counts[rows.TRAIN], len(features))

    def check_blessing_metrics(self, named: Sequence[str]) -> None:
        """Raises when a metric the blessing names does not exist for the data's task (before any work)."""
        check_task_metrics(named, self.prepared.schema.label.task)

    def preflight(self, job: JobConfig, **options: Any) -> Any:
        """`preflight.run_preflight` of the family's step on this data (`options`: `preflight_prepared`'s)."""
        return estimator.preflight_prepared(job, self.prepared, **options)

    def train(self, job: JobConfig, model_dir: str, progress_seconds: float) -> estimator.TrainResult:
        return estimator.train_prepared(job, self.prepared, model_dir, progress_seconds)

    def evaluate(
        self, job: JobConfig, model_dir: str, config: BlessingConfig, baseline_dir: Optional[str], blessing_dir: str
    ) -> Evaluation:
        return evaluate_and_bless(job, self.prepared, model_dir, config, baseline_dir, blessing_dir)

    def report_inputs(self, evaluation: Evaluation, run: Mapping[str, Any], drift: Mapping[str, Any]):
        return report_lib.report_inputs(evaluation, self.prepared, run, drift=drift or None)

    def export(self, job: JobConfig, model_dir: str, export_dir: str) -> ExportResult:
        verify = self.prepared.files("eval")
        profile, rules = self.prepared.profile(), scoring_options(self.prepared)
        return release.export_verified(
            job, self.prepared.schema, model_dir, export_dir, verify_files=verify, data_profile=profile, row_rules=rules
        )

    def predict(
        self,
        job: JobConfig,
        model_dir: str,
        data: str,
        output_dir: str,
        engine: str,
        beam: BeamConfig,
        skew: SkewConfig = DEFAULT_SKEW,
        predicted: Optional[Mapping[str, Any]] = None,
    ) -> PredictResult:
        """Scores `data`, its rows first checked against the training profile (`skew`; on Beam, profiled by its
        workers: the same skew.json bytes as in-process), its predictions against the eval rows' (`predicted`,
        `Blessing.eval_predictions`; None: not compared)."""
        if engine == BEAM:
            from estimator_lib.predict import beam as beam_predict  # Apache Beam takes about 1 s to import

            return beam_predict.score(job, self.prepared, model_dir, data, output_dir, beam, skew, predicted)
        return score(job, self.prepared, model_dir, data, output_dir, skew, predicted)


@dataclasses.dataclass(frozen=True)
class Records:
    """A user's model_fn on a preparation of their TFRecords (`model.user.prepare`)."""

    prepared: user_prepare.PreparedRecords

    @property
    def manifest(self) -> Dict[str, Any]:
        return self.prepared.manifest

    def facts(self) -> Dict[str, Any]:
        counts = dict(self.prepared.counts)
        return {
            "counts": counts,
            "schema_file": user_prepare.FEATURE_SPEC,
            "label": self.prepared.spec.label,
            "task": USER_TASK,
            "classes": [],
        }

    def for_data(self, job: JobConfig) -> JobConfig:
        """`job` with its settings that follow the data set from the train split (a model_fn's own features are
        its business: the budget and the rounds only)."""
        return job.for_data(self.prepared.counts[user_prepare.TRAIN], 0)

    def check_blessing_metrics(self, named: Sequence[str]) -> None:
        """Nothing to check: a user's metric_fn names its own metrics."""

    def preflight(self, job: JobConfig, **options: Any) -> Any:
        """`preflight.run_preflight` of the user's model_fn and its train input_fn (`options`: `preflight_user`'s)."""
        user = user_stages.user_model(job, self.prepared)
        return user_run.preflight_user(job, user, self.prepared.files(user_prepare.TRAIN), **options)

    def train(self, job: JobConfig, model_dir: str, progress_seconds: float) -> estimator.TrainResult:
        return user_stages.train(job, self.prepared, model_dir, progress_seconds)

    def evaluate(
        self, job: JobConfig, model_dir: str, config: BlessingConfig, baseline_dir: Optional[str], blessing_dir: str
    ) -> Evaluation:
        return user_stages.evaluate(job, self.prepared, model_dir, config, baseline_dir)

    def report_inputs(self, evaluation: Evaluation, run: Mapping[str, Any], drift: Mapping[str, Any]):
        return report_lib.user_report_inputs(evaluation, self.prepared.manifest, run)

    def export(self, job: JobConfig, model_dir: str, export_dir: str) -> ExportResult:
        return user_stages.export(job, self.prepared, model_dir, export_dir)

    def predict(
        self,
        job: JobConfig,
        model_dir: str,
        data: str,
        output_dir: str,
        engine: str,
        beam: BeamConfig,
        skew: SkewConfig = DEFAULT_SKEW,
        predicted: Optional[Mapping[str, Any]] = None,
    ) -> PredictResult:
        """Scores `data` with the user's model_fn, its records first checked against the train split's profile
        (`skew`; on Beam, counted by its workers); `predicted` is not read: a model_fn's predictions are its own
        (RunConfig refuses `predict.max_prediction_shift` for one)."""
        if engine == BEAM:
            from estimator_lib.engine.user import beam as user_beam  # Apache Beam takes about 1 s to import

            return user_beam.predict_stage(job, self.prepared, model_dir, data, output_dir, beam, skew)
        return user_stages.predict(job, self.prepared, model_dir, data, output_dir, skew)


Source = Union[Rows, Records]


def open_dataset(dataset_uri: str) -> Source:
    """The source a prepared dataset holds: a user model's records (it holds their feature spec) or rows."""
    if user_prepare.is_records(dataset_uri):
        return Records(user_prepare.load_records(dataset_uri))
    return Rows(rows.load_prepared(dataset_uri))


@dataclasses.dataclass(frozen=True)
class Prepared:
    """A finished preparation: its source, the data validation's report and Markdown, what it read."""

    source: Source
    report: Union[ValidationReport, user_prepare.RecordsValidation]
    read: List[str]


def prepare(given: PrepareSpec, config: PrepareConfig, output_dir: str, reference: Optional[str], report_uri: str):
    """Prepares the spec's data into `output_dir` and writes its validation report to `report_uri`: a user's
    TFRecords checked against their feature spec and split, or rows continuing `reference`'s schema (validated
    against its data), on this host or Apache Beam as `given.engine` says."""
    if config.feature_spec:
        records = user_prepare.prepare_records(config, output_dir)
        storage.write_text(report_uri, user_prepare.validation_markdown(records))
        return Prepared(Records(records), user_prepare.RecordsValidation.of(records), config.reads())
    with beam_passes(given.engine, given.beam) as chosen:
        continued = retrain.prepare_continuing(config, output_dir, reference, given.validation, report_uri, chosen)
    return Prepared(Rows(continued.prepared), continued.report, config.reads())


def code_identity(code: Optional[str]) -> Dict[str, Any]:
    """What names a user's code in a stage's record: a local folder by its content fingerprint (so a stage reruns
    when the code changes; a stage knows no data paths, so data kept in the folder is fingerprinted too), a staged
    wheel by its URI (its version is its fingerprint)."""
    if not code:
        return {"code": "installed"}
    if os.path.isdir(code):
        return {"code": code, "fingerprint": package.fingerprint(code)[0]}
    return {"code": code}


def code_record(job: JobConfig) -> Dict[str, Any]:
    """{"user_code": its identity} for a stage that runs a user's model_fn (it reruns when the code changes, even
    when training gives the same variables); {} for a built-in family, whose code is the library's."""
    return {"user_code": code_identity(job.model.code)} if job.model.model_fn else {}
