"""A user's code folder staged as a versioned, fingerprinted Python wheel, so a remote stage (a Vertex AI custom
job) installs exactly the code the run was given: `pip install --no-deps <wheel>` when the component starts.

The wheel is built here, without a build backend or a network: the folder's files under their own paths (`select`
says which, and lists what it leaves out and why), and the `.dist-info` that pip needs. Its version is
`0+<fingerprint>`, the first 12 hex digits of a sha256 over the packaged files' paths and contents, so the same
code always gives the same version and the same bytes (entries sorted, fixed times and modes), and a run record
that names the version names the code. Files are streamed a block at a time: memory stays flat for any size.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import glob
import hashlib
import os
import zipfile
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from estimator_lib import fingerprints
from estimator_lib.model.user.model_fn import UserCodeError

DISTRIBUTION = "tpu_pipeline_user_code"
IGNORE_FILE = ".tpu-pipeline-ignore"  # glob patterns, one a line; "dir/" matches folders only; "#" comments
LARGE_FILE = 10 << 20
_COMPILED_SUFFIXES = (".pyc", ".pyo")
_KEY_LIKE = ("*.env", "*.pem", "*.p12", "id_rsa*", "id_ed25519*")
_RUN_OUTPUT = (".lock", "runs")  # what a local run's --output holds (pipelines.runs): its lock and its runs
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclasses.dataclass(frozen=True)
class Selection:
    """What a code folder packages ({relative POSIX path: bytes}, sorted), what it leaves out ({path: why}, a folder
    as "path/") and warnings about packaged files (large, or holding keys)."""

    files: Dict[str, int]
    excluded: Dict[str, str]
    warnings: Tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class StagedCode(Selection):
    """A staged code folder: what it packaged (`Selection`), the wheel's path, its distribution name and version,
    and the content fingerprint."""

    wheel: str
    name: str
    version: str
    fingerprint: str


def _ignore_patterns(code_dir: str) -> List[str]:
    path = os.path.join(code_dir, IGNORE_FILE)
    if not os.path.isfile(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def _ignored(pattern: str, relative: str, is_dir: bool) -> bool:
    """gitignore's simple cases: "dir/" only a folder; a pattern with a "/" against the path from the folder,
    one without against the name."""
    if pattern.endswith("/") and not is_dir:
        return False
    pattern = pattern.rstrip("/")
    return fnmatch.fnmatchcase(relative if "/" in pattern else os.path.basename(relative), pattern.lstrip("/"))


def _why_excluded(entry: os.DirEntry, relative: str, is_dir: bool, patterns: List[str]) -> str:
    if entry.name.startswith("."):
        return "hidden"
    if entry.name == "__pycache__" if is_dir else entry.name.endswith(_COMPILED_SUFFIXES):
        return "compiled Python"
    if is_dir and all(os.path.exists(os.path.join(entry.path, name)) for name in _RUN_OUTPUT):
        return "the output folder of a local run"
    return next((f"{IGNORE_FILE}: {p}" for p in patterns if _ignored(p, relative, is_dir)), "")


def _warnings(code_dir: str, files: Dict[str, int]) -> Tuple[str, ...]:
    found = []
    for relative, size in files.items():
        name, path = os.path.basename(relative), os.path.join(code_dir, relative)
        if size > LARGE_FILE:
            found.append(f"{relative}: {size >> 20} MB, packaged into the wheel every stage installs")
        if any(fnmatch.fnmatchcase(name, p) for p in _KEY_LIKE) or name.endswith(".json") and _holds_key(path):
            found.append(f"{relative}: looks like a private key or credentials, uploaded with your code")
    return tuple(f"{w}; add it to {IGNORE_FILE} if your code does not need it" for w in found)


def _holds_key(path: str) -> bool:
    with open(path, "rb") as f:  # a service account's key file is a few kB: the first MB tells
        return b'"private_key"' in f.read(1 << 20)


def select(code_dir: str, leave_out: Optional[Mapping[str, str]] = None) -> Selection:
    """The files of `code_dir` that are packaged: all but hidden entries, compiled Python, a local run's output
    folder, what `IGNORE_FILE` names and what `leave_out` does ({local path or glob: why}, matched by real path: a
    file or a folder; the run's data). Links are followed when they stay inside the folder.

    Raises:
      UserCodeError: `code_dir` is not a directory, holds no Python file, or holds a link that leaves it or loops.
    """
    if not os.path.isdir(code_dir):
        raise UserCodeError(f"--code {code_dir}: not a directory; give the folder that holds your package")
    root = os.path.realpath(code_dir)
    patterns, files, excluded, pending = _ignore_patterns(code_dir), {}, {}, [("", (root,))]
    left_out = {os.path.realpath(p): why for given, why in (leave_out or {}).items() for p in glob.glob(given)}
    while pending:
        folder, above = pending.pop()  # `above`: the real paths of the folders walked through, to catch a loop
        for entry in os.scandir(os.path.join(code_dir, folder)):
            relative, is_dir = folder + entry.name, entry.is_dir()
            real = os.path.realpath(entry.path)
            why = _why_excluded(entry, relative, is_dir, patterns) or left_out.get(real)
            if why:
                excluded[relative + "/" * is_dir] = why
                continue
            outside = os.path.commonpath([root, real]) != root
            if outside or is_dir and real in above:
                where = "is a link to {}, outside the folder" if outside else "leads back to {}, a folder above it"
                raise UserCodeError(
                    f"--code {code_dir}: {relative} {where.format(real)}; copy what your code needs into the "
                    f"folder, or add {relative} to {IGNORE_FILE}"
                )
            if is_dir:
                pending.append((relative + "/", (*above, real)))
            elif entry.is_file():
                files[relative] = entry.stat().st_size
            else:
                excluded[relative] = "not a regular file"
    if not any(f.endswith(".py") for f in files):
        raise UserCodeError(f"--code {code_dir}: holds no Python file; give the folder that holds your package")
    files = dict(sorted(files.items()))
    return Selection(files, dict(sorted(excluded.items())), _warnings(code_dir, files))


def fingerprint(code_dir: str) -> Tuple[str, List[str]]:
    """(sha256 hex over every packaged file's path and content, the files): what names the code."""
    files = list(select(code_dir).files)
    return fingerprints.fingerprint_code(code_dir, files), files


def _write(archive: zipfile.ZipFile, path: str, size: int, blocks: Iterable[bytes]) -> str:
    """Writes one entry from `blocks` (`size` bytes expected); returns its RECORD line."""
    info = zipfile.ZipInfo(path, date_time=_ZIP_TIME)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    info.file_size = size  # as ZipFile.writestr sets it: the header (zip64 or not) is the same
    digest = hashlib.sha256()
    with archive.open(info, "w") as entry:
        for block in blocks:
            digest.update(block)
            entry.write(block)
    return f"{path},sha256={base64.urlsafe_b64encode(digest.digest()).rstrip(b'=').decode('ascii')},{info.file_size}"


def stage_code(code_dir: str, out_dir: str, leave_out: Optional[Mapping[str, str]] = None) -> StagedCode:
    """Builds the wheel of what `select(code_dir, leave_out)` packages into `out_dir` (created if missing); returns
    what was staged.

    Raises:
      UserCodeError: as `select` says.
    """
    chosen = select(code_dir, leave_out)
    digest = fingerprints.fingerprint_code(code_dir, list(chosen.files))
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
        for relative in chosen.files:
            path = os.path.join(code_dir, relative)
            with open(path, "rb") as f:
                blocks = iter(lambda: f.read(fingerprints.BLOCK), b"")
                record.append(_write(archive, relative, os.path.getsize(path), blocks))
        record += [_write(archive, path, len(data), [data]) for path, data in metadata.items()]
        record.append(f"{dist_info}/RECORD,,")
        text = ("\n".join(record) + "\n").encode("utf-8")
        _write(archive, f"{dist_info}/RECORD", len(text), [text])
    os.replace(wheel + ".tmp", wheel)
    return StagedCode(**vars(chosen), wheel=wheel, name=DISTRIBUTION, version=version, fingerprint=digest)
