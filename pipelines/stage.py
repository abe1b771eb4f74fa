"""`python -m pipelines.stage ARGS`: one stage of a local run. KFP's own `kfp.dsl.executor_main` with the same
arguments, then, once it has returned (the stage's outputs written and checked by the component, and KFP's
executor output written), an immediate exit.

An ordinary interpreter exit after a stage costs about a second of this machine's time (TensorFlow's and
Python's teardown) and does nothing the run needs: every output is already on disk. A stage that fails raises
as before and exits the ordinary way with its traceback and a non-zero code. `pipelines.local` launches the
local runner's stages through this module (`_fast_stage_exit`); the compiled pipeline spec, and what runs on
Vertex AI, are unchanged.
"""

from __future__ import annotations

import logging
import os
import sys

from kfp.dsl import executor_main

KFP_EXECUTOR_MODULE = "kfp.dsl.executor_main"


def main() -> None:
    executor_main.executor_main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
