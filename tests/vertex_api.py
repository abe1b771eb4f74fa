"""The one fake of the Vertex AI tests: the Vertex AI API itself, which cannot be reached here.

`FakeVertexAPI` replaces the service clients' calls that google-cloud-aiplatform makes (creating pipeline jobs
and schedules; reading a pipeline job; the Metadata service calls behind Experiments) and the SDK's
artifact-bucket check, answers like the service would and records what would have been sent. Everything above
that boundary (the SDK objects, the requests) is real.

`FakeModelService` stands in for the Model Registry's client (the register step gets it injected).

`custom_job_request` turns a compiled pipeline's TPU task into the `aiplatform_v1.CustomJob` that
google-cloud-pipeline-components' launcher would create for it, through the launcher's own functions.
"""

from __future__ import annotations

import json
import re
from typing import Any

PIPELINE_JOB_ID = "tpu-estimator-pipeline-20250101"


class FakeVertexAPI:
    """Stands in for the Vertex AI API: records create requests and answers like the service would."""

    def __init__(self, monkeypatch):
        from google.api_core import exceptions
        from google.cloud.aiplatform import initializer
        from google.cloud.aiplatform.compat.services import (
            metadata_service_client_v1,
            pipeline_service_client_v1,
            schedule_service_client_v1,
        )
        from google.cloud.aiplatform.compat.types import context_v1, metadata_store_v1, pipeline_job_v1
        from google.cloud.aiplatform.utils import gcs_utils

        # aiplatform keeps credentials it found (google.auth.default) in a process-wide config: a fresh one per
        # test, restored after it, so no test sees credentials another test's fake provided.
        monkeypatch.setattr(initializer, "global_config", initializer._Config())
        # The GCS emulator sets GOOGLE_CLOUD_PROJECT for the session, which a fresh config would send to the
        # Resource Manager (the network, retried for about a minute) to turn into a project id.
        monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
        monkeypatch.delenv("CLOUD_ML_PROJECT_ID", raising=False)
        self.pipeline_jobs, self.schedules, self.buckets = [], [], []
        self.contexts: dict[str, Any] = {}
        self.created_contexts, self.context_children = [], []
        fake = self

        def create_pipeline_job(self, parent, pipeline_job, pipeline_job_id=None, timeout=None, **_):
            fake.pipeline_jobs.append({"parent": parent, "pipeline_job": pipeline_job, "id": pipeline_job_id})
            created = type(pipeline_job).wrap(type(pipeline_job).pb(pipeline_job))
            created.name = f"{parent}/pipelineJobs/{pipeline_job_id}"
            return created

        def get_pipeline_job(self, name, **_):
            project_location = name.split("/pipelineJobs/")[0]
            return pipeline_job_v1.PipelineJob(
                name=name,
                state="PIPELINE_STATE_RUNNING",
                job_detail=pipeline_job_v1.PipelineJobDetail(
                    pipeline_run_context=context_v1.Context(
                        name=f"{project_location}/metadataStores/default/contexts/{name.rsplit('/', 1)[1]}",
                        schema_title="system.PipelineRun",
                    )
                ),
            )

        def create_schedule(self, parent, schedule, timeout=None, **_):
            fake.schedules.append({"parent": parent, "schedule": schedule})
            created = type(schedule).wrap(type(schedule).pb(schedule))
            created.name = f"{parent}/schedules/123"
            return created

        def get_metadata_store(self, name, **_):
            return metadata_store_v1.MetadataStore(name=name)

        def get_context(self, name, **_):
            if name not in fake.contexts:
                raise exceptions.NotFound(f"{name} not found")
            return fake.contexts[name]

        def create_context(self, parent, context, context_id=None, **_):
            fake.created_contexts.append({"parent": parent, "context": context, "context_id": context_id})
            created = type(context).wrap(type(context).pb(context))
            created.name = f"{parent}/contexts/{context_id}"
            fake.contexts[created.name] = created
            return created

        def add_context_children(self, context, child_contexts, **_):
            fake.context_children.append({"context": context, "child_contexts": list(child_contexts)})

        pipelines = pipeline_service_client_v1.PipelineServiceClient
        monkeypatch.setattr(pipelines, "create_pipeline_job", create_pipeline_job)
        monkeypatch.setattr(pipelines, "get_pipeline_job", get_pipeline_job)
        monkeypatch.setattr(schedule_service_client_v1.ScheduleServiceClient, "create_schedule", create_schedule)
        metadata = metadata_service_client_v1.MetadataServiceClient
        for name, function in (
            ("get_metadata_store", get_metadata_store),
            ("get_context", get_context),
            ("create_context", create_context),
            ("add_context_children", add_context_children),
        ):
            monkeypatch.setattr(metadata, name, function)
        monkeypatch.setattr(
            gcs_utils,
            "create_gcs_bucket_for_pipeline_artifacts_if_it_does_not_exist",
            lambda **kwargs: fake.buckets.append(kwargs["output_artifacts_gcs_dir"]),
        )


class FakeModelService:
    """Stands in for `aiplatform_v1.ModelServiceClient`: `models` and `versions` exist already; requests are
    recorded; an upload creates version 7 (of a new model 456 without a parent model)."""

    def __init__(self, models=(), versions=()):
        self.models, self.versions = list(models), list(versions)
        self.requests = []

    def list_models(self, request):
        self.requests.append(("list_models", dict(request)))
        wanted = re.fullmatch(r'display_name="(.*)"', request["filter"]).group(1)
        return [m for m in self.models if m.display_name == wanted]

    def list_model_versions(self, request):
        self.requests.append(("list_model_versions", dict(request)))
        key, value = re.fullmatch(r'labels\.([a-z0-9-]+)="(.*)"', request["filter"]).groups()
        return [v for v in self.versions if v.labels.get(key) == value]

    def upload_model(self, request):
        from google.cloud import aiplatform_v1

        self.requests.append(("upload_model", request))

        class Operation:
            @staticmethod
            def result(timeout):
                model = request.parent_model or f"{request.parent}/models/456"
                return aiplatform_v1.UploadModelResponse(model=model, model_version_id="7")

        return Operation()


_PARAMETER = re.compile(r"\{\{\$\.inputs\.parameters\['([a-z_]+)'\]\}\}")


def _whole_numbers(value: Any) -> Any:
    """Struct numbers are floats in the compiled YAML; Vertex AI writes whole ones as integers when it fills a
    payload in (every custom job built by google-cloud-pipeline-components relies on it: `accelerator_count`
    is an int32)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def custom_job_request(spec: dict, task: str) -> Any:
    """The `aiplatform_v1.CustomJob` the launcher of the compiled task `task` sends (with the task's defaults).

    The payload template of the task's executor is filled with the component's parameter defaults, as Vertex AI
    does at run time; then the launcher's own functions turn it into the create request (system labels added,
    empty fields removed, `max_wait_duration` dropped unless FLEX_START), caught by a recording client.
    """
    from google.cloud import aiplatform_v1
    from google_cloud_pipeline_components.container.v1.custom_job import remote_runner
    from google_cloud_pipeline_components.container.v1.gcp_launcher.utils import json_util

    component = spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]
    parameters = spec["components"][component]["inputDefinitions"]["parameters"]
    executor = spec["deploymentSpec"]["executors"][f"exec-{task}"]["container"]
    payload = executor["args"][executor["args"].index("--payload") + 1]

    def fill(match: re.Match) -> str:
        value = _whole_numbers(parameters[match.group(1)].get("defaultValue"))
        text = json.dumps(value)
        return text[1:-1] if isinstance(value, str) else text  # strings sit inside quotes in the template

    job_spec = json_util.recursive_remove_empty(
        json.loads(remote_runner.insert_system_labels_into_payload(_PARAMETER.sub(fill, payload)))
    )

    class RecordingJobClient:
        sent: dict = {}

        def create_custom_job(self, parent, custom_job):
            RecordingJobClient.sent = {"parent": parent, "custom_job": custom_job}
            return aiplatform_v1.CustomJob(name=f"{parent}/customJobs/1")

    remote_runner.create_custom_job_with_client(RecordingJobClient(), "projects/p/locations/l", job_spec)
    return aiplatform_v1.CustomJob(RecordingJobClient.sent["custom_job"])
