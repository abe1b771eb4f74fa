"""The stage engine: each stage (prepare, train, evaluate, export, batch predict) as one call on the model source
its dataset holds, the built-in families on prepared rows or a user's model_fn on their prepared TFRecords
(`sources`). A component makes one of these calls; it never asks which kind of model it runs.
"""

from estimator_lib.engine.sources import (
    Prepared,
    Records,
    Rows,
    Source,
    code_record,
    open_dataset,
    prepare,
)

__all__ = ["Prepared", "Records", "Rows", "Source", "code_record", "open_dataset", "prepare"]
