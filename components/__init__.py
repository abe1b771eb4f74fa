"""KFP v2 components: one thin adapter per pipeline stage over one `estimator_lib` call.

Each stage is a plain function in its own module (`resolve`, `prepare`, `train`, `evaluate`, `batch_predict`,
`export`, `serving_check`, `release`; unit-testable in-process). Its body loads its inputs, turns parameters into
typed configs (`adapter`), makes the one library call that does the stage's work, and checks and describes its
outputs (`artifacts`). A stage run again on the same inputs reuses its finished outputs (`records`).

`build_stages(image)` turns the functions into lightweight components on the project image, so the same
component runs in `kfp.local.SubprocessRunner(use_venv=False)` (the calling environment has the project
installed) and on Vertex AI (the image has it): `install_kfp_package=False`, no packages to install. The image is
chosen when the pipeline is compiled, so the compiled YAML pins one immutable image.

KFP ships only a component function's source to the container, so each component body imports what it uses
inside itself. That is the only reason anything in `components/` imports inside a function; the modules the
bodies import (`adapter`, `artifacts`) import at their top.
"""

import dataclasses
from typing import Any, Callable

from kfp import dsl

from components.batch_predict import batch_predict
from components.evaluate import evaluate_model
from components.export import export_model
from components.prepare import prepare_data
from components.release import release_model
from components.resolve import resolve_inputs
from components.serving_check import check_serving
from components.train import train_model

__all__ = [
    "Stages",
    "batch_predict",
    "build_stages",
    "check_serving",
    "evaluate_model",
    "export_model",
    "prepare_data",
    "release_model",
    "resolve_inputs",
    "train_model",
]


@dataclasses.dataclass(frozen=True)
class Stages:
    """The pipeline's components, in DAG order."""

    resolve: Any
    prepare: Any
    train: Any
    evaluate: Any
    batch_predict: Any
    export: Any
    serving_check: Any
    release: Any


def _component(func: Callable, image: str):
    return dsl.component(func, base_image=image, install_kfp_package=False, packages_to_install=[])


def build_stages(image: str) -> Stages:
    """The eight stages as lightweight components on `image`."""
    return Stages(
        resolve=_component(resolve_inputs, image),
        prepare=_component(prepare_data, image),
        train=_component(train_model, image),
        evaluate=_component(evaluate_model, image),
        batch_predict=_component(batch_predict, image),
        export=_component(export_model, image),
        serving_check=_component(check_serving, image),
        release=_component(release_model, image),
    )
