"""The component image reference: set when compiling, and immutable.

A compiled pipeline names the image its components run on. A mutable tag (":latest", ":v1") could point at
different code by the time a scheduled run starts, so compiled pipelines pin either a digest
(`REPO@sha256:<64 hex>`) or a commit tag (`REPO:<7-40 hex digits of a git commit>`, the tag the Docker build
recipe in docs/pipeline.md pushes).
"""

from __future__ import annotations

import re
import subprocess
from typing import Optional

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


def git_commit(directory: str) -> Optional[str]:
    """The checked-out commit of the git work tree holding `directory`, or None outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", directory, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def default_image(repository: str, directory: str) -> str:
    """`repository:<current git commit>`: the tag `docker build` in docs/pipeline.md gives the image."""
    commit = git_commit(directory)
    if commit is None:
        raise ValueError(
            f"cannot tag the image with a commit: {directory!r} is not a git checkout; pass --image "
            "REPO@sha256:<digest> (or REPO:<commit>)"
        )
    return check_image(f"{repository}:{commit}")
