"""Run-cost stage (Vertex AI only): the run's measured durations, and the cost they imply, as an artifact.

A thin adapter over `estimator_lib.cloud.cost.run_cost`. It runs last, after the release stage: it reads the run's task
details from Vertex AI (each stage's start and end), prices the seconds each stage ran on the machine it was
compiled for with the price table shipped in the package, and writes the record as run_cost.json. It never
fails the run: when the task details cannot be read, the record says why.
"""

import json
from typing import Any

from kfp.dsl import Artifact, Output

from estimator_lib import storage

RECORD_FILE = "run_cost.json"
# The record holds the error whole; metadata travels on command lines and gets its start.
MAX_ERROR_CHARS = 500


def record_run_cost(pipeline_job: str, location: str, stages: dict, placement: dict, run_cost: Output[Artifact]):
    """Writes the cost record of this run (`estimator_lib.cloud.cost.run_cost`).

    Args:
      pipeline_job: this run's resource name (Vertex AI fills it in at run time).
      location: the run's region (Vertex AI fills it in at run time).
      stages: KFP task name -> stage ("train-model" -> "train").
      placement: stage -> the machine it was compiled for ({"machineType", "accelerator": {"type", "count"} or
        None, "spot", "dataflow"}).
      run_cost: output; run_cost.json holds the record, the metadata its total and the file's URI.
    """
    from components.run_cost import describe_run_cost
    from estimator_lib.cloud import cost

    table = cost.read_prices(cost.PRICES_FILE)
    describe_run_cost(run_cost, cost.run_cost(pipeline_job, location, stages, placement, table))


def describe_run_cost(artifact: Artifact, record: dict[str, Any]) -> None:
    """Writes `record` as run_cost.json in the artifact; its metadata holds a bounded summary and the file's URI."""
    uri = storage.join(artifact.uri, RECORD_FILE)
    storage.write_text(uri, json.dumps(record, indent=2, sort_keys=True))
    artifact.metadata.update(
        {
            "record_uri": uri,
            "total": record["total"],
            "currency": record["currency"],
            "complete": record["complete"],
            "missing": len(record["missing"]),
            "price_table_date": record["priceTable"]["date"],
            "error": record["error"][:MAX_ERROR_CHARS],
        }
    )
