"""`python -m pipelines ...` is `tpu-pipeline ...`."""

import sys

from pipelines.cli import main

sys.exit(main())
