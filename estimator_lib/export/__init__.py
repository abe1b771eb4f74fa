"""Export: one SavedModel with a CPU (`serve`) and a TPU (`serve,tpu`) meta graph, verified after writing.

`saved_model` exports, verifies and loads; `serving` builds the serving input receivers; `serving_check` serves an
export in a fresh process (`serving_child`, standalone: no project code) and compares it with batch predictions.
"""

from estimator_lib.export.saved_model import (
    ATOL,
    CPU_TAGS,
    METADATA_FILE,
    RTOL,
    TPU_CALL_OP,
    TPU_TAGS,
    ExportResult,
    ExportVerificationError,
    ServingModel,
    export_model,
    load_serving_model,
    read_export_metadata,
    run_cpu_graph,
    verify_export,
)

__all__ = [
    "ATOL",
    "RTOL",
    "CPU_TAGS",
    "METADATA_FILE",
    "TPU_CALL_OP",
    "TPU_TAGS",
    "ExportResult",
    "ExportVerificationError",
    "ServingModel",
    "export_model",
    "load_serving_model",
    "read_export_metadata",
    "run_cpu_graph",
    "verify_export",
]
