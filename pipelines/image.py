"""The component image: its reference, set when compiling and immutable, and the TensorFlow runtime it carries.

A compiled pipeline names the image its components run on. A mutable tag (":latest", ":v1") could point at
different code by the time a scheduled run starts, so compiled pipelines pin either a digest
(`REPO@sha256:<64 hex>`) or a commit tag (`REPO:<7-40 hex digits of a git commit>`, the tag
scripts/build-image.sh gives the image; docs/image.md).

The image's TensorFlow is the Cloud TPU VM build plus libtpu (or tensorflow-cpu); `TPU_RUNTIMES` is the one table
of which libtpu goes with which TPU TensorFlow build, and the image build runs `check_runtime` on what it installed.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

from estimator_lib.manifest import git_commit

DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
COMMIT_TAG = re.compile(r"^[^@\s]+:[0-9a-f]{7,40}$")
# Local runs execute the components in this environment; the image is never pulled.
LOCAL_IMAGE = "local-python-environment"


def check_image(reference: str) -> str:
    """Returns `reference` if it is immutable; raises ValueError saying how to pin it otherwise."""
    if DIGEST.match(reference) or COMMIT_TAG.match(reference):
        return reference
    raise ValueError(
        f"--image {reference!r} is not an immutable reference; use a digest (REPO@sha256:<64 hex digits>, "
        "printed by `docker push`) or a commit tag (REPO:$(git rev-parse HEAD))"
    )


def default_image(repository: str, directory: str) -> str:
    """`repository:<current git commit>`: the tag scripts/build-image.sh gives the image by default."""
    commit = git_commit(directory)
    if commit is None:
        raise ValueError(
            f"cannot tag the image with a commit: {directory!r} is not a git checkout; pass --image "
            "REPO@sha256:<digest> (or REPO:<commit>)"
        )
    return check_image(f"{repository}:{commit}")


# TensorFlow builds for Cloud TPU VMs -> the libtpu release they were published with (Cloud TPU's supported
# configurations; Vertex AI's custom-container instructions for TensorFlow 2.15 pair these two). The Dockerfile's
# TF_TPU_VERSION / LIBTPU_VERSION defaults are a row of this table (tests/test_dockerfile.py).
TPU_RUNTIMES: Dict[str, str] = {"2.15.0": "1.9.0"}
# tf.estimator ends at TensorFlow 2.15: both are pinned together (pyproject.toml).
TENSORFLOW_SERIES = "2.15."
ESTIMATOR_VERSION = "2.15.0"
TENSORFLOW_BUILDS = ("tpu", "cpu")
LIBTPU_PATH = "/lib/libtpu.so"


def check_runtime(build: str, tensorflow: str, estimator: str, libtpu: Optional[str]) -> None:
    """Raises ValueError unless the versions in an image belong together.

    Args:
      build: the image's TensorFlow build, "tpu" or "cpu" (the Dockerfile's TENSORFLOW_BUILD).
      tensorflow: the installed `tf.__version__`.
      estimator: the installed tensorflow-estimator distribution's version.
      libtpu: the libtpu version installed at LIBTPU_PATH, or None when there is none.
    """
    if build not in TENSORFLOW_BUILDS:
        raise ValueError(f"TENSORFLOW_BUILD={build!r} is not a TensorFlow build; use one of {TENSORFLOW_BUILDS}")
    if not tensorflow.startswith(TENSORFLOW_SERIES):
        raise ValueError(
            f"TensorFlow {tensorflow} is installed, but tf.estimator needs {TENSORFLOW_SERIES}x; "
            f"build with a TensorFlow {TENSORFLOW_SERIES}x wheel"
        )
    if estimator != ESTIMATOR_VERSION:
        raise ValueError(f"tensorflow-estimator {estimator} is installed; TensorFlow 2.15 needs {ESTIMATOR_VERSION}")
    if build == "cpu":
        if libtpu is not None:
            raise ValueError(f"the cpu image has a libtpu ({LIBTPU_PATH}); only the tpu build installs one")
        return
    if tensorflow not in TPU_RUNTIMES:
        raise ValueError(
            f"TensorFlow {tensorflow} has no known libtpu; set TF_TPU_VERSION to one of {sorted(TPU_RUNTIMES)} "
            "(or add the pair from Cloud TPU's supported configurations to TPU_RUNTIMES in pipelines/image.py)"
        )
    if libtpu != TPU_RUNTIMES[tensorflow]:
        raise ValueError(
            f"libtpu {libtpu} does not go with TensorFlow {tensorflow}; set LIBTPU_VERSION={TPU_RUNTIMES[tensorflow]}"
        )
