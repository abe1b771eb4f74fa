"""`BeamConfig`: where the Apache Beam engine runs preparation and batch prediction (`engine="beam"`).

Preparation and batch prediction run in one process by default (`ENGINES[0]`, "inprocess": worker processes
on one host). With `engine="beam"` the same steps run as Apache Beam pipelines: on Beam's local runner for
tests and local runs, on Dataflow at scale. The engine never changes the output: the Beam output is byte
for byte the in-process output (docs/scale.md), so neither the engine nor these settings are recorded in a
manifest. TensorFlow-free, like every config.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from estimator_lib.config.base import JsonConfig, require

INPROCESS, BEAM = "inprocess", "beam"
ENGINES = (INPROCESS, BEAM)
DIRECT_RUNNER, DASK_RUNNER, DATAFLOW_RUNNER = "DirectRunner", "DaskRunner", "DataflowRunner"
RUNNERS = (DIRECT_RUNNER, DASK_RUNNER, DATAFLOW_RUNNER)
DASK_DEFAULT_WORKERS = 2
# Dask bag partitions of the pipeline's first collection: Beam's Dask runner puts 128 elements in one partition
# by default (one task, one worker); small partitions spread the input files over the workers.
DASK_PARTITIONS = 64


def check_engine(engine: str, owner: str = "engine") -> None:
    require(engine in ENGINES, f"{owner}={engine!r} must be one of {ENGINES} ('beam' runs on Apache Beam)")


@dataclasses.dataclass(frozen=True)
class BeamConfig(JsonConfig):
    """How the Beam engine runs. Frozen, validated on construction, JSON round trip.

    Attributes:
      runner: "DirectRunner" (this machine: Beam's local FnApiRunner, the one the DirectRunner itself uses
        for batch pipelines), "DaskRunner" (Beam's Dask runner on a `dask.distributed` cluster of worker
        processes on this machine, started and closed for each pipeline; needs the `beam` extra's dask) or
        "DataflowRunner" (Google Cloud Dataflow).
      direct_num_workers: DirectRunner only: worker processes; None runs in this process (one thread), which
        is the fastest for small inputs.
      dask_num_workers: DaskRunner only: the local cluster's worker processes (one thread each; None: 2).
      project, region: DataflowRunner: the Google Cloud project and region of the Dataflow job.
      temp_location: DataflowRunner: a gs:// prefix for Beam's staging and for the work files the stages
        exchange (deleted after each run). DirectRunner: a local directory for them (None: the temp dir).
      max_workers: DataflowRunner: the autoscaling ceiling (None: Dataflow's default).
      machine_type: DataflowRunner: the workers' Compute Engine machine type, e.g. "n2-standard-4" (None:
        Dataflow's default).
      sdk_container_image: DataflowRunner: the workers' container, the pipeline's component image (it holds
        this package, TensorFlow and the same Beam version as the launcher, which Dataflow requires).
      service_account: DataflowRunner: the workers' service account (None: the project's Compute Engine
        default service account).
    """

    runner: str = DIRECT_RUNNER
    direct_num_workers: Optional[int] = None
    dask_num_workers: Optional[int] = None
    project: Optional[str] = None
    region: Optional[str] = None
    temp_location: Optional[str] = None
    max_workers: Optional[int] = None
    machine_type: Optional[str] = None
    sdk_container_image: Optional[str] = None
    service_account: Optional[str] = None

    def __post_init__(self) -> None:
        require(self.runner in RUNNERS, f"beam.runner={self.runner!r} must be one of {RUNNERS}")
        for name in ("direct_num_workers", "dask_num_workers", "max_workers"):
            value = getattr(self, name)
            require(
                value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0),
                f"beam.{name}={value!r} must be None or a positive integer",
            )
        for name, runner in (("direct_num_workers", DIRECT_RUNNER), ("dask_num_workers", DASK_RUNNER)):
            require(
                getattr(self, name) is None or self.runner == runner,
                f"beam.{name}={getattr(self, name)!r} applies to runner='{runner}' only, not "
                f"runner={self.runner!r}; unset it"
                + ("" if self.runner != DATAFLOW_RUNNER else " and size Dataflow with max_workers"),
            )
        if self.runner == DATAFLOW_RUNNER:
            self._check_dataflow()

    def _check_dataflow(self) -> None:
        for name, example in (
            ("project", "my-project"),
            ("region", "us-central1"),
            ("temp_location", "gs://BUCKET/dataflow-tmp"),
            ("sdk_container_image", "REPO@sha256:DIGEST (the component image)"),
        ):
            require(
                bool(getattr(self, name)),
                f"beam.{name} is not set; the DataflowRunner needs it (e.g. {example}), or use runner='DirectRunner'",
            )
        require(
            str(self.temp_location).startswith("gs://"),
            f"beam.temp_location={self.temp_location!r} must be a gs:// prefix for the DataflowRunner: Dataflow "
            "workers cannot see this machine's disk",
        )

    @property
    def is_local(self) -> bool:
        """The pipeline's workers run on this machine (they share its disk)."""
        return self.runner in (DIRECT_RUNNER, DASK_RUNNER)

    @property
    def local_workers(self) -> int:
        """Worker processes of a local runner (1: the DirectRunner in this process)."""
        if self.runner == DASK_RUNNER:
            return self.dask_num_workers or DASK_DEFAULT_WORKERS
        return self.direct_num_workers or 1

    def pipeline_args(self, job_name: str) -> List[str]:
        """Beam's command-line options for this config (`PipelineOptions(args)`); the DaskRunner's cluster
        address is added when the cluster is up."""
        if self.runner == DASK_RUNNER:
            return ["--runner=DaskRunner", f"--dask_npartitions={DASK_PARTITIONS}"]
        if self.is_local:
            args = ["--runner=DirectRunner"]
            if self.direct_num_workers:
                args += ["--direct_running_mode=multi_processing", f"--direct_num_workers={self.direct_num_workers}"]
            return args
        args = [
            "--runner=DataflowRunner",
            f"--project={self.project}",
            f"--region={self.region}",
            f"--temp_location={self.temp_location}",
            f"--staging_location={self.temp_location.rstrip('/')}/staging",  # type: ignore[union-attr]
            f"--sdk_container_image={self.sdk_container_image}",
            f"--job_name={job_name}",
            # The image holds this package and its dependencies; nothing is staged or installed at start-up.
            "--sdk_location=container",
        ]
        if self.max_workers:
            args.append(f"--max_num_workers={self.max_workers}")
        if self.machine_type:
            args.append(f"--machine_type={self.machine_type}")
        if self.service_account:
            args.append(f"--service_account_email={self.service_account}")
        return args
