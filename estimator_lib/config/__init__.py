"""Every config type, frozen and validated when built, with one JSON round trip; free of TensorFlow.

- `base`: `ConfigError`, `JsonConfig` (the JSON round trip all configs share, every value checked against its
  declared type), dotted-key overrides, `--set` texts parsed by the field's type.
- `job`: where the model runs (`TPUSettings`), how it trains (`TrainingConfig`, `OptimizerConfig`,
  `EarlyStoppingConfig`), which model it is (`ModelConfig`), and `JobConfig` holding the three.
- `prepare`: `PrepareConfig`, how raw rows become TFRecords.
- `blessing`: `BlessingConfig`, when a trained model may be published.
- `validation`: `ValidationConfig`, how far a run's data may drift from the published model's data.
- `run`: `RunConfig`, what a pipeline run is given beyond those (the data, what to batch-predict), the one
  source of the pipeline's defaults, and `resolve_run`, the one place it is resolved from what a user gave;
  `HYPERPARAMETERS`, the headline hyperparameters a run's summary shows.
- `stages`: one frozen spec per pipeline stage (`RunConfig.stage_specs()`), each stage's one parameter.
"""

from estimator_lib.config.base import ConfigError, JsonConfig, parse_override, positive_int, require, set_dotted
from estimator_lib.config.blessing import (
    DEFAULT_COMPARISON,
    DEFAULT_REFERENCE_METRIC,
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    TASK_METRICS,
    BlessingConfig,
    BlessingError,
    higher_is_better,
)
from estimator_lib.config.job import (
    BUILTIN_FAMILIES,
    INPUT_PIPELINE_MODES,
    OPTIMIZERS,
    PER_HOST_V2,
    SCHEDULES,
    TASKS,
    EarlyStoppingConfig,
    JobConfig,
    ModelConfig,
    OptimizerConfig,
    TPUSettings,
    TrainingConfig,
)
from estimator_lib.config.prepare import DEFAULT_MISSING_VALUES, PrepareConfig
from estimator_lib.config.run import (
    EMBEDDED_DATA,
    EMBEDDED_LABEL,
    HYPERPARAMETERS,
    PREPARED_SPLITS,
    RUN_TASKS,
    RunConfig,
    hyperparameters,
    prediction_kind,
    resolve_configs,
)
from estimator_lib.config.validation import ValidationConfig

__all__ = [
    "BUILTIN_FAMILIES",
    "DEFAULT_COMPARISON",
    "DEFAULT_REFERENCE_METRIC",
    "DEFAULT_MISSING_VALUES",
    "EMBEDDED_DATA",
    "EMBEDDED_LABEL",
    "HIGHER_IS_BETTER",
    "HYPERPARAMETERS",
    "INPUT_PIPELINE_MODES",
    "LOWER_IS_BETTER",
    "OPTIMIZERS",
    "PER_HOST_V2",
    "PREPARED_SPLITS",
    "RUN_TASKS",
    "SCHEDULES",
    "TASKS",
    "TASK_METRICS",
    "BlessingConfig",
    "BlessingError",
    "ConfigError",
    "EarlyStoppingConfig",
    "JobConfig",
    "JsonConfig",
    "ModelConfig",
    "OptimizerConfig",
    "PrepareConfig",
    "RunConfig",
    "TPUSettings",
    "TrainingConfig",
    "ValidationConfig",
    "higher_is_better",
    "hyperparameters",
    "parse_override",
    "positive_int",
    "prediction_kind",
    "require",
    "resolve_configs",
    "set_dotted",
]
