"""What a Vertex AI run of a user's own model is given from this machine: their code and their feature spec.

A component on Vertex AI cannot read the submitter's disk. `--code DIR` is built into a versioned wheel named by
its content fingerprint (`estimator_lib.model.user.package`) and uploaded under the pipeline root's `code/`; a
local `--feature-spec` file is uploaded under `staged/`, named by its sha256. The run's settings then name those
gs:// copies (the train stage records the code's URI, whose version is its fingerprint), so the components
install exactly the code that was submitted. A wheel or gs:// URI given as `--code`, and a gs:// feature spec,
are used as they are. `--dry-run` shows where each would go and uploads nothing.

The other way in: bake the code into a derived image (docs/byom.md) and give no `--code`; the model_fn is then
imported from the image's installed packages.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from typing import Any, Mapping, Optional

from estimator_lib import storage
from estimator_lib.model.user import package

CODE_DIR, STAGED_DIR = "code", "staged"


@dataclasses.dataclass(frozen=True)
class Staged:
    """Where the run's code and feature spec come from, what was (or, in a dry run, would be) uploaded
    (`described`: {} when the run has neither), and warnings about the code folder's files."""

    code: Optional[str]
    feature_spec: Optional[str]
    described: dict[str, Any]
    warnings: tuple[str, ...]


def _stage_code(code: str, pipeline_root: str, upload: bool, leave_out: Mapping[str, str]):
    """(where the code goes, its description, warnings about its files)."""
    if storage.is_gcs(code) or code.endswith(".whl"):
        where = code
        if not storage.is_gcs(code):
            where = storage.join(pipeline_root, CODE_DIR, os.path.basename(code))
            if upload:
                storage.upload_file(code, where)
        return where, {"source": code, "package": where, "how": "the wheel as given, installed when a stage starts"}, ()
    with tempfile.TemporaryDirectory() as out:
        staged = package.stage_code(code, out, leave_out)
        where = storage.join(pipeline_root, CODE_DIR, os.path.basename(staged.wheel))
        if upload and not storage.exists(where):  # named by its content: an existing copy is the same bytes
            storage.upload_file(staged.wheel, where)
    described = {
        "source": code,
        "package": where,
        "version": staged.version,
        "fingerprint": staged.fingerprint,
        "files": staged.files,
        "excluded": staged.excluded,
        "how": "a wheel built from --code, installed on the import path when a stage starts",
    }
    return where, described, staged.warnings


def _stage_spec(path: str, pipeline_root: str, upload: bool) -> tuple[str, dict[str, Any]]:
    if storage.is_gcs(path):
        return path, {"source": path, "staged": path}
    with open(path, "rb") as f:
        data = f.read()
    where = storage.join(pipeline_root, STAGED_DIR, f"feature_spec-{hashlib.sha256(data).hexdigest()[:12]}.json")
    if upload:
        storage.write_bytes(where, data)
    return where, {"source": path, "staged": where}


def stage_user_files(
    code: Optional[str],
    feature_spec: Optional[str],
    pipeline_root: str,
    upload: bool,
    data: Optional[Mapping[str, Optional[str]]] = None,
) -> Staged:
    """Stages `--code` and `--feature-spec` under `pipeline_root` for a Vertex AI run (uploading only when
    `upload`); returns the gs:// URIs the run's settings take instead, a description for the request and warnings
    about the code folder's files. `data` ({flag: path or glob}, the run's data) and the feature spec are left out
    of a code folder they lie in, so the code's version does not change with them."""
    described: dict[str, Any] = {}
    warnings: tuple[str, ...] = ()
    if code:
        given = {**(data or {}), "--feature-spec": feature_spec}
        leave_out = {path: f"the run's {flag}" for flag, path in given.items() if path}
        code, described["code"], warnings = _stage_code(code, pipeline_root, upload, leave_out)
    if feature_spec:
        feature_spec, described["feature_spec"] = _stage_spec(feature_spec, pipeline_root, upload)
    return Staged(code, feature_spec, {"uploaded": upload, **described} if described else {}, warnings)
