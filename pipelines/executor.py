"""`python -m pipelines.executor ARGS`: one stage of a local run in a process of its own. KFP's own
`kfp.dsl.executor_main` with the same arguments, then, once it has returned (the stage's outputs written and
checked by the component, and KFP's executor output written), an immediate exit.

An ordinary interpreter exit after a stage costs about a second of this machine's time (TensorFlow's and
Python's teardown) and does nothing the run needs: every output is already on disk. A stage that fails raises
normally and exits the ordinary way with its traceback and a non-zero code. A stage the local runner starts
(`pipelines.stage`) runs here when no warm stage server is there to run it (`pipelines.stage_server`, which
calls `execute` in a forked child); the compiled pipeline spec, and what runs on Vertex AI, are unchanged.
"""

from __future__ import annotations

import logging
import os
import sys

from kfp.dsl import executor_main


def execute() -> None:
    """Runs KFP's executor on `sys.argv` and flushes what the stage printed and logged."""
    executor_main.executor_main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()


def main() -> None:
    execute()
    os._exit(0)


if __name__ == "__main__":
    main()
