"""TPU-strict mode: build on the CPU the graphs a TPU would run, and refuse what a TPU would reject.

`checks` runs the checks (`check_model`, `check_export`) into a `StrictReport` of `Finding`s (`findings`: each
`fails`, `differs` or `note`); `inputs` checks input functions and carries the simulated TPU context; `graph`
checks the model graph; `xla` compiles one step with XLA on the CPU; `export` checks a SavedModel's TPU meta
graph; `user_code` names an exception the user's own model_fn raised (`ModelBuildError`).
"""

from estimator_lib.strict.checks import (
    ALL_MODES,
    STRICT_FILE,
    StrictReport,
    TPUStrictError,
    check_export,
    check_model,
    config_findings,
    record_report,
)
from estimator_lib.strict.findings import DIFFERS, FAILS, NOTE, Finding
from estimator_lib.strict.user_code import ModelBuildError

__all__ = [
    "ALL_MODES",
    "DIFFERS",
    "FAILS",
    "NOTE",
    "Finding",
    "ModelBuildError",
    "STRICT_FILE",
    "StrictReport",
    "TPUStrictError",
    "check_export",
    "check_model",
    "config_findings",
    "record_report",
]
