"""The evaluation's verdict as an artifact type of its own in the components' signatures.

KFP 2.13 accepts only `system.*` and `google.*` schema titles, and Vertex ML Metadata has no blessing type, so
`ModelBlessing` is the documented system type `system.Artifact` (schema version 0.0.1) under a name that says
what it holds: a directory with blessing.json (the verdict, every check, the models' metrics), and metadata
with `blessed` (true or false), `reasons`, `summary` and `based_on` (the LATEST version it was decided against),
which the Vertex AI console shows and the release stage reads without opening the file. KFP adds
`from components.artifact_types import ModelBlessing` to the shipped source of a component annotated with it;
the project image provides the module.
"""

from kfp import dsl


class ModelBlessing(dsl.Artifact):
    """The evaluate stage's verdict: blessing.json inside, `blessed` in the metadata (a `system.Artifact`)."""

    schema_title = "system.Artifact"
    schema_version = "0.0.1"
