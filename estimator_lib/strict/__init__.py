"""TPU-strict mode: build on the CPU the graphs a TPU would run, and refuse what a TPU would reject.

`checks` runs the checks (`check_model`, `check_export`); `inputs` checks input functions and carries the
simulated TPU context; `graph` checks the model graph; `xla` compiles one step with XLA on the CPU; `export`
checks a SavedModel's TPU meta graph.
"""

from estimator_lib.strict.checks import (
    ALL_MODES,
    StrictReport,
    TPUStrictError,
    check_export,
    check_model,
    config_violations,
)

__all__ = ["ALL_MODES", "StrictReport", "TPUStrictError", "check_export", "check_model", "config_violations"]
