"""`tpu-pipeline` (also `python -m pipelines`): run the pipeline locally, compile it, submit or schedule it.

The only place that reads flags and environment variables. Each command resolves its flags into typed
settings (`settings`), checks what can be checked before anything starts (`checks`), and hands them to one
function: `local.run_local`, `pipeline.compile_pipeline`, `vertex.submit`, `vertex.schedule`,
`reproduce.reproduce`. The parser is `parser` (its flag groups `arguments`); the commands are `commands` and
`vertex_commands`.

Exit codes: 0 done; 1 a stage failed (run-local: its summary says which, and why; reproduce: a stage's outputs
differ from the record; diff: the runs differ); 2 a bad command line
(checked before anything starts); 128 + the signal when interrupted (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
"""

from pipelines.cli.commands import main
from pipelines.cli.parser import build_parser
from pipelines.cli.settings import resolve_settings

__all__ = ["build_parser", "main", "resolve_settings"]
