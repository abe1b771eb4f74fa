"""Running a Beam pipeline on `BeamConfig`'s runner: the DirectRunner (in this process, or worker processes in
multi-processing mode), Beam's Dask runner on a local `dask.distributed` cluster of worker processes, or
Dataflow. Runs on the host CPU; nothing here touches a TPU.

The Dask cluster is started for one pipeline and closed with it: its scheduler runs in this process (it holds
task metadata, not elements), its workers are processes of their own, one thread each, and elements move
between them without passing through this process.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from estimator_lib.config.beam import DASK_RUNNER, BeamConfig
from estimator_lib.data import beam as beam_engine

try:  # the Dask runner needs the beam extra's apache-beam, dask and distributed
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.dask.dask_runner import DaskRunner
except ImportError:  # pragma: no cover - exercised only without the extra
    DaskRunner = None


Run = Callable[[Callable[[Any], None], str], None]


@contextlib.contextmanager
def session(config: BeamConfig) -> Iterator[Run]:
    """Yields `run(build, purpose)`: builds a pipeline with `build(pipeline)` and runs it to the end on
    `config`'s runner. A Dask cluster is started once for the session's pipelines and closed with it.

    `run` raises RuntimeError when the pipeline failed (a worker's error, or a worker lost beyond the runner's
    retries).
    """
    if config.runner != DASK_RUNNER:
        yield lambda build, purpose: beam_engine.run_pipeline(build, config, purpose)
        return
    with beam_engine.local_dask_cluster(config.local_workers) as address:
        yield lambda build, purpose: _run_on_dask(build, config, purpose, address)


def _run_on_dask(build: Callable[[Any], None], config: BeamConfig, purpose: str, address: str) -> None:
    options = PipelineOptions(
        config.pipeline_args(beam_engine.job_name(purpose)) + [f"--dask_client_address={address}"]
    )
    pipeline = beam_engine.beam.Pipeline(runner=DaskRunner(), options=options)
    build(pipeline)
    result = pipeline.run()
    try:
        result.wait_until_finish()
    except Exception as error:  # a worker's error arrives as itself; name the pipeline and the runner
        raise RuntimeError(f"the Beam pipeline {purpose!r} failed on the DaskRunner: {error!r}") from error
    finally:
        result.client.close()
