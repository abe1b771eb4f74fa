"""The artifact registry: every artifact a stage writes, named once, with the stage that writes it and the function
that fingerprints it from its files and recorded metadata.

`components.artifacts` describes each artifact with its function here, `pipelines.reproduce` computes it again
with the same function, and the run's summary, `show`, `list` and `diff` take the stages, their order and each
stage's headline artifact from here. Nothing here loads TensorFlow (`show` and `diff` never do).
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Callable, Mapping
from typing import Any, Optional

from estimator_lib import storage
from estimator_lib.config.stages import IMPORTANCE_FILE, SERVING_CHECK_FILE, SLICES_FILE
from estimator_lib.fingerprints import fingerprint_directory, fingerprint_files, json_digest, saved_model_fingerprint

BLESSING_FILE = "blessing.json"  # inside the Blessing: the verdict, every check, both models' metrics
PUBLICATION_FILE = "publication.json"  # inside the publication: whether, where and why the model was published

# (uri, recorded metadata, the export's fingerprint) -> fingerprint
Fingerprint = Callable[[str, Mapping[str, Any], str], str]


def blessing_files(uri: str) -> list[str]:
    """The Blessing's files its fingerprint covers: blessing.json, and slices.json and importance.json where the
    evaluation wrote them."""
    named = (BLESSING_FILE, SLICES_FILE, IMPORTANCE_FILE)
    return [
        storage.join(uri, name) for name in named if name == BLESSING_FILE or storage.exists(storage.join(uri, name))
    ]


def serving_check_fingerprint(result: Mapping[str, Any]) -> str:
    """The serving check's fingerprint: what was checked and found, not where the files were (a reproduction
    elsewhere fingerprints equal)."""
    return json_digest(
        {k: result[k] for k in ("rows_checked", "signatures", "skipped", "max_abs_diff", "rtol", "atol")}
    )


def publication_fingerprint(published: bool, exported: str, reason: str) -> str:
    """What a release decided: published or not, which export (its fingerprint) or why not; not the version's
    time-stamped name."""
    return json_digest({"published": exported if published else None, "reason": "" if published else reason})


def _checkpoint(uri: str, metadata: Mapping[str, Any], exported: str) -> str:
    checkpoint = metadata["checkpoint"]  # its variables: equal variables, equal fingerprint (not its .meta graph)
    return fingerprint_files([checkpoint + ".index", *storage.glob(checkpoint + ".data-*")], uri)


def _serving(uri: str, metadata: Mapping[str, Any], exported: str) -> str:
    return serving_check_fingerprint(json.loads(storage.read_text(storage.join(uri, SERVING_CHECK_FILE))))


def _publication(uri: str, metadata: Mapping[str, Any], exported: str) -> str:
    published = json.loads(storage.read_text(storage.join(uri, PUBLICATION_FILE)))
    return publication_fingerprint(bool(published["published"]), exported, published["reason"])


def _metadata(uri: str, metadata: Mapping[str, Any], exported: str) -> str:
    return json_digest(dict(metadata))  # an artifact that lives in its metadata only (`components.records`)


@dataclasses.dataclass(frozen=True)
class Artifact:
    """One artifact of a stage.

    Attributes:
      name: the component's output name.
      stage: the stage that writes it.
      fingerprint: computes its fingerprint again from its files and recorded metadata; None when no file
        determines it (the HTML report's leaves out the run's facts it shows: only its stage computes it).
      headline: the stage's artifact its manifest sits beside, whose fingerprint the run's summary records.
      summary_key: the name the run's outputs and summary give it, when not `name`.
      listed: the run's summary lists its URI beside the stages' headline artifacts.
    """

    name: str
    stage: str
    fingerprint: Optional[Fingerprint] = _metadata
    headline: bool = False
    summary_key: str = ""
    listed: bool = False

    @property
    def key(self) -> str:
        return self.summary_key or self.name


ARTIFACTS = (
    Artifact("dataset", "prepare", lambda uri, metadata, exported: fingerprint_directory(uri), headline=True),
    Artifact("validation", "prepare"),
    Artifact("model", "train", _checkpoint, headline=True),
    Artifact("blessing", "evaluate", lambda uri, m, e: fingerprint_files(blessing_files(uri), uri), headline=True),
    Artifact("metrics", "evaluate"),
    Artifact("classification_metrics", "evaluate"),
    Artifact("slice_metrics", "evaluate"),
    Artifact("report", "evaluate", None, listed=True),
    Artifact("verdict", "evaluate", lambda uri, m, e: fingerprint_files([uri], posixpath.dirname(uri)), listed=True),
    Artifact("predictions", "batch_predict", lambda uri, metadata, e: fingerprint_files(metadata["shards"], uri), True),
    Artifact("exported", "export", lambda uri, metadata, e: saved_model_fingerprint(metadata["export_dir"]), True),
    Artifact("checked", "serving_check", _serving, headline=True, summary_key="serving_check"),
    Artifact("publication", "release", _publication, headline=True),
)
STAGES = tuple(dict.fromkeys(a.stage for a in ARTIFACTS))  # in the DAG's order
BY_NAME = {a.name: a for a in ARTIFACTS}
HEADLINE = {a.stage: a for a in ARTIFACTS if a.headline}  # stage -> the artifact its manifest sits beside
# summary.json's "artifacts": {stage: its headline artifact's URI, report and verdict: theirs}, in this order.
SUMMARY_ARTIFACTS = tuple((a.stage if a.headline else a.name, a) for a in ARTIFACTS if a.headline or a.listed)
# The artifacts whose fingerprints a run's summary records (the serving check's is in its own section).
SUMMARY_FINGERPRINTS = tuple(a.name for a in HEADLINE.values() if not a.summary_key)


def fingerprint(name: str, uri: str, metadata: Mapping[str, Any], exported: str = "") -> str:
    """Artifact `name`'s fingerprint from its files and recorded metadata; `exported`: the export's fingerprint,
    which a publication names.

    Raises:
      ValueError: no file determines the artifact's fingerprint (the report).
      FileNotFoundError: a file it covers is missing.
    """
    function = BY_NAME[name].fingerprint
    if function is None:
        raise ValueError(f"{name}: no file determines its fingerprint; only its stage computes it")
    return function(uri, metadata, exported)
