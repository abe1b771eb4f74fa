"""A user's code folder staged as a versioned, fingerprinted Python wheel, so a remote stage (a Vertex AI custom
job) installs exactly the code the run was given: `pip install --no-deps <wheel>` when the component starts.

The wheel is built here, without a build backend or a network: every file of the folder (caches, hidden
entries and compiled files left out) under its own path, and the `.dist-info` that pip needs. Its version is
`0+<fingerprint>`, the first 12 hex digits of a sha256 over the files' paths and contents, so the same code
always gives the same version and the same bytes (entries sorted, fixed times and modes), and a run record that
names the version names the code.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import zipfile
from typing import List, Tuple

from estimator_lib import fingerprints
from estimator_lib.model.user.model_fn import UserCodeError

DISTRIBUTION = "tpu_pipeline_user_code"
_SKIPPED_DIRS = ("__pycache__",)
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class StagedCode:
    """A staged code folder: the wheel's path, its distribution name and version, and the content fingerprint."""

    wheel: str
    name: str
    version: str
    fingerprint: str
    files: Tuple[str, ...]


def _files(code_dir: str) -> List[str]:
    """The folder's files as sorted relative POSIX paths (hidden entries, caches and compiled files left out)."""
    found = []
    for parent, dirs, names in os.walk(code_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in names:
            if name.startswith(".") or name.endswith(_SKIPPED_SUFFIXES):
                continue
            found.append(os.path.relpath(os.path.join(parent, name), code_dir).replace(os.sep, "/"))
    return sorted(found)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def fingerprint(code_dir: str) -> Tuple[str, List[str]]:
    """(sha256 hex over every staged file's path and content, the files): what names the code."""
    if not os.path.isdir(code_dir):
        raise UserCodeError(f"--code {code_dir}: not a directory; give the folder that holds your package")
    files = _files(code_dir)
    if not any(f.endswith(".py") for f in files):
        raise UserCodeError(f"--code {code_dir}: holds no Python file; give the folder that holds your package")
    return fingerprints.fingerprint_code(code_dir, files), files


def _write(archive: zipfile.ZipFile, path: str, data: bytes) -> None:
    info = zipfile.ZipInfo(path, date_time=_ZIP_TIME)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def stage_code(code_dir: str, out_dir: str) -> StagedCode:
    """Builds the wheel of `code_dir` into `out_dir` (created if missing); returns what was staged.

    Raises:
      UserCodeError: `code_dir` is not a directory, or holds no Python file.
    """
    digest, files = fingerprint(code_dir)
    version = f"0+{digest[:12]}"
    dist_info = f"{DISTRIBUTION}-{version}.dist-info"
    metadata = {
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {DISTRIBUTION}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tpu-estimator-pipelines\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    os.makedirs(out_dir, exist_ok=True)
    wheel = os.path.join(out_dir, f"{DISTRIBUTION}-{version}-py3-none-any.whl")
    record = []
    with zipfile.ZipFile(wheel + ".tmp", "w") as archive:
        for relative in files:
            with open(os.path.join(code_dir, relative), "rb") as f:
                data = f.read()
            _write(archive, relative, data)
            record.append(f"{relative},{_record_hash(data)},{len(data)}")
        for path, data in metadata.items():
            _write(archive, path, data)
            record.append(f"{path},{_record_hash(data)},{len(data)}")
        record.append(f"{dist_info}/RECORD,,")
        _write(archive, f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode("utf-8"))
    os.replace(wheel + ".tmp", wheel)
    return StagedCode(wheel, DISTRIBUTION, version, digest, tuple(files))
