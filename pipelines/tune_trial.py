"""`python -m pipelines.tune_trial`: one trial of a Vertex AI hyperparameter tuning job, on the component image.

Vertex AI starts this command once per trial, appending the trial's values as `--PARAMETER_ID=VALUE` (ids from
`estimator_lib.config.tuning.parameter_id`). It trains the pipeline's train spec with those values on the
prepared dataset (`estimator_lib.engine.tuning.run_trial`: judged on a validation split, a user model's carved from its
train records into the trial's directory) into the trial's model directory, and reports the space's metric where
Vertex AI reads it (`estimator_lib.engine.tuning.report_metric`).
The only place besides the CLI that reads flags and the environment for a trial.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from components import adapter
from estimator_lib import engine, storage
from estimator_lib.config.stages import TrainSpec
from estimator_lib.config.tuning import check_tunable, load_space
from estimator_lib.engine.tuning import objective_value, report_metric, run_trial, trial_source

MODEL_DIR_ENV = "AIP_MODEL_DIR"  # set by Vertex AI for each trial: under the job's base output directory


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, dict[str, str]]:
    """The trial's own flags, and the study's values ({parameter id: value text})."""
    parser = argparse.ArgumentParser(prog="python -m pipelines.tune_trial")
    parser.add_argument("--dataset", required=True, help="the prepared dataset's URI")
    parser.add_argument("--spec", required=True, help="the train stage's spec (a TrainSpec as JSON text)")
    parser.add_argument("--tpu", required=True, help="where the trial runs, as the train stage's tpu parameter")
    parser.add_argument("--space", required=True, help="the search space as JSON text (SearchSpace.to_json)")
    parser.add_argument("--output", default=os.environ.get(MODEL_DIR_ENV), help="the trial's directory")
    args, rest = parser.parse_known_args(argv)
    values = {}
    for item in rest:
        name, sep, value = item.partition("=")
        if not (name.startswith("--") and sep):
            parser.error(f"{item!r}: the study's values come as --PARAMETER_ID=VALUE")
        values[name[2:]] = value
    if not args.output:
        parser.error(f"--output is required outside a Vertex AI trial (${MODEL_DIR_ENV} is unset)")
    return args, values


def main(argv: Sequence[str] | None = None) -> int:
    args, values = parse(sys.argv[1:] if argv is None else argv)
    space = load_space("the tuning job's space", args.space)
    spec = adapter.decode_spec(TrainSpec, args.spec)
    check_tunable(space, spec.job)
    job = space.trial_job(adapter.training_job(spec, args.tpu), values)
    source = trial_source(engine.open_dataset(args.dataset), storage.join(args.output, "validation"))
    result = run_trial(job, source, args.output)
    value = objective_value(result.metrics, space.metric)
    path = report_metric(space.metric, value, result.global_step)
    print(f"trial: {space.metric}={value} at step {result.global_step}, reported in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
