"""Preflight: before a TPU is paid for, will the model fit in HBM, how fast can a step be, will the host keep up.

`run_preflight` gives a `Preflight` (memory per core from XLA's compiled train step with the TPU's tile padding,
the largest per-core batch found by compiling, the step's roofline bound, the train input's rate);
`largest_batch` searches the batch alone. `chips` holds the TPU figures, `padding` the tile rule, `hlo` reads the
compiled step, `step` compiles it, `inputs` measures the input. See docs/preflight.md.
"""

from estimator_lib.preflight.report import DOES_NOT_FIT, FITS, INPUT_BOUND, Preflight, TopBuffer
from estimator_lib.preflight.run import largest_batch, run_preflight

__all__ = ["DOES_NOT_FIT", "FITS", "INPUT_BOUND", "Preflight", "TopBuffer", "largest_batch", "run_preflight"]
