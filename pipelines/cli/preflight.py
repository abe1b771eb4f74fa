"""`tpu-pipeline preflight`, and the preflight `submit` and `schedule` run before anything is uploaded: the run's
model_fn and train input_fn built as its train stage builds them, on its data prepared into a temporary folder by
the prepare stage's own code (`engine.prepare`, in this process), then `preflight.run_preflight` for a TPU type, with
the rows batch prediction will score when they are a prepared split (its step compiled too: the prediction's bound).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from typing import Any

from estimator_lib.cloud import cost
from estimator_lib.config import RunConfig
from estimator_lib.config.beam import INPROCESS
from estimator_lib.config.run import SPLIT, prediction_kind
from pipelines import checks
from pipelines import tpu as tpu_presets
from pipelines.cli.settings import resolve_local_settings

# Seconds the train input is measured for (after preflight's 1 s warm-up): enough for a rate within the factor
# this machine's shared cores vary by (docs/preflight.md).
INPUT_SECONDS = 2.0
FITS = "fits"  # `preflight.FITS` (that package loads TensorFlow)


def tpu_type(name: str) -> tpu_presets.TPUPreset:
    """The preset of a TPU type to plan for: any preset, the experimental v5e ones too (a plan runs nothing)."""
    if name not in tpu_presets.PRESETS:
        tpu_presets.preset(name)  # raises, naming the types there are
    return tpu_presets.PRESETS[name]


def run_preflight(
    settings: RunConfig, tpu: tpu_presets.TPUPreset, prices: cost.PriceTable | None, region: str, spot: bool = False
) -> Any:
    """The `preflight.Preflight` of the run's model on `tpu`: its data prepared as the prepare stage prepares it
    (in-process, the schema inferred: no published model is read), its job resolved for that data as the train
    stage resolves it, priced in `region` with `prices`.

    Raises:
      checks.UsageError: the job's batch sizes do not split over the TPU's cores.
    """
    from components import adapter  # TensorFlow: only when a preflight runs
    from estimator_lib import engine

    checks.tpu_target(settings.job, tpu.num_cores, f"--tpu {tpu.name}")
    specs = settings.stage_specs()
    given = dataclasses.replace(specs.prepare, engine=INPROCESS)
    options = {"accelerator": tpu.accelerator_type, "cores": tpu.num_cores, "input_seconds": INPUT_SECONDS}
    options.update(prices=prices, region=region, spot=spot)
    with tempfile.TemporaryDirectory(prefix="tpu-pipeline-preflight-") as folder:
        report = os.path.join(folder, "validation.md")
        source = engine.prepare(given, adapter.prepare_config(given), os.path.join(folder, "data"), None, report).source
        options["predict_rows"] = predict_rows(settings.predict_data, source.facts()["counts"])
        return source.preflight(source.for_data(specs.train.job), **options)


def predict_rows(predict_data: str, counts: dict[str, int]) -> int | None:
    """The rows batch prediction will score: a prepared split's count; None for files (not read before the run)."""
    return counts.get(predict_data) if prediction_kind(predict_data) == SPLIT else None


def print_preflight(found: Any, as_json: bool) -> None:
    print(json.dumps(found.to_dict(), indent=2, sort_keys=True) if as_json else found.describe())


def cmd_preflight(args: argparse.Namespace) -> int:
    """Exit 0 when the model fits and its input keeps up, 1 when not (the verdict says why)."""
    tpu = tpu_type(args.tpu)
    prices = cost.read_prices(args.prices)
    with tempfile.TemporaryDirectory(prefix="tpu-pipeline-preflight-") as output:
        settings = resolve_local_settings(args, output)
    found = run_preflight(settings, tpu, prices, args.region)
    print_preflight(found, args.json)
    return 0 if found.verdict == FITS else 1
