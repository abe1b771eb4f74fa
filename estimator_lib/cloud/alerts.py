"""Run alerts: one JSON message to a webhook when a pipeline run fails, naming the stage and its error, or when
it succeeded with a stage's warning.

The message (`Alert.payload`), the same from a local run and from Vertex AI:

    {"text": "tpu-estimator-pipeline run R failed at prepare: DataError: ...",   # what Slack / Google Chat show
     "pipeline": "tpu-estimator-pipeline", "run": R, "state": "FAILED", "stage": "prepare",
     "error": "DataError: ...", "where": "local", "link": <the run's log, or its Vertex AI console page>,
     "warning": ""}

`state` is Vertex AI's final state: "FAILED", or "CANCELLED" for a run that was stopped (interrupted, locally).
A run that succeeded sends nothing, unless a stage warned: a batch prediction whose skew check warned
(`predict.skew=warn`, `estimator_lib.predict.skew`) sends one message with state "SUCCEEDED", the stage, an empty
"error" and the check's one line in "warning" ("... run R succeeded with a warning at batch_predict: skew check
warned: ..."). Every message has the same fields, and the webhook gets one message per run. Sending never fails
a run: a webhook that is down, slow (`TIMEOUT_SECONDS`) or answers with an error is logged and reported back as
text (`deliver`, `post`), and the run's own outcome stands.

On Vertex AI the exit handler's task gets the run's final status (`PipelineTaskFinalStatus`), which names no
stage: the stage and its error come from the run's task details (`read_task_details`, `vertex_failure`), and a
succeeded run's warning from its tasks' output artifacts (`vertex_warning`). There a
task's error is Vertex AI's (the job's exit status and where its logs are); the Python exception's first line is
in the stage's log, which `link` leads to.

The webhook's URL often holds its token: it is never logged, only its scheme and host (`redact_url`). Given as
a Secret Manager secret ("secret:projects/P/secrets/NAME"), it is read when the alert is sent (`webhook_url`), so
it is in no compiled spec and no task's inputs.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

import google.auth
from google.auth.transport.requests import AuthorizedSession

from estimator_lib.cloud.tasks import read_task_details
from estimator_lib.config.alerts import SECRET_PREFIX, redact_url

TIMEOUT_SECONDS = 10.0
SUCCEEDED, FAILED, CANCELLED = "SUCCEEDED", "FAILED", "CANCELLED"
SECRET_MANAGER = "https://secretmanager.googleapis.com/v1/"
_log = logging.getLogger(__name__)


def first_line(text: str) -> str:
    """The first line of `text` that is not blank, stripped."""
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


@dataclasses.dataclass(frozen=True)
class Alert:
    """What an alert says: a run that failed or was cancelled, or one that succeeded with a stage's warning.

    Attributes:
      pipeline: the pipeline's name.
      run: the run's ID (a local run's folder name, a Vertex AI PipelineJob's resource name).
      state: "FAILED", "CANCELLED", or "SUCCEEDED" (with a `warning`).
      stage: the stage that failed ("prepare", "train", ...), that was running when the run was stopped, or that
        warned; "" when there is none (stopped between stages, or the run's task details could not be read).
      error: the first line of the stage's error ("" for a warning).
      where: "local" or "vertex".
      link: where to read more: the local run's log, or the run's page in the Google Cloud console.
      warning: a run that succeeded: the warning's one line ("" for a failure).
    """

    pipeline: str
    run: str
    state: str
    stage: str
    error: str
    where: str
    link: str = ""
    warning: str = ""

    @property
    def kind(self) -> str:
        """What the console calls it: "failure alert" or "warning alert"."""
        return "warning alert" if self.state == SUCCEEDED else "failure alert"

    def payload(self) -> dict[str, str]:
        """The JSON object posted: the fields, and a "text" line chat webhooks (Slack, Google Chat) display."""
        at = f" at {self.stage}" if self.stage else ""
        if self.state == SUCCEEDED:
            text = f"{self.pipeline} run {self.run} succeeded with a warning{at}: {self.warning}"
        else:
            verb = "was cancelled" if self.state == CANCELLED else "failed"
            text = f"{self.pipeline} run {self.run} {verb}{at}: {self.error}"
        return {"text": text, **dataclasses.asdict(self)}


def post(url: str, alert: Alert, timeout: float = TIMEOUT_SECONDS) -> Optional[str]:
    """POSTs `alert.payload()` as JSON to `url`.

    Returns:
      None when the server answered 2xx; otherwise why the alert was not delivered (the URL left out). It never
      raises for the network or the server: an alert must not turn into the run's error.
    """
    body = json.dumps(alert.payload(), sort_keys=True).encode("utf-8")
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310 - the user's http(s) URL
            answer.read()
        return None
    except urllib.error.HTTPError as e:
        reason = f"the server answered HTTP {e.code} {e.reason}"
    except urllib.error.URLError as e:
        reason = f"cannot reach it: {getattr(e.reason, 'strerror', None) or e.reason}"
    except (TimeoutError, OSError) as e:
        reason = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else f"cannot reach it: {e}"
    _log.warning("%s to %s not delivered: %s", alert.kind, redact_url(url), reason)
    return reason


def read_secret(version: str, session: Any = None) -> str:
    """The text of the Secret Manager secret version `version` ("projects/P/secrets/S/versions/V"), read over
    Secret Manager's REST API with the environment's credentials (a pipeline's service account needs
    roles/secretmanager.secretAccessor on the secret)."""
    if session is None:
        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        session = AuthorizedSession(credentials)
    answer = session.get(f"{SECRET_MANAGER}{version}:access", timeout=TIMEOUT_SECONDS)
    answer.raise_for_status()
    return base64.b64decode(answer.json()["payload"]["data"]).decode("utf-8").strip()


def webhook_url(webhook: str, read: Callable[[str], str] = read_secret) -> str:
    """The URL to post to: `webhook` itself, or the text of the secret "secret:projects/P/secrets/S[/versions/V]"
    names (its latest version by default), read with `read`."""
    if not webhook.startswith(SECRET_PREFIX):
        return webhook
    name = webhook[len(SECRET_PREFIX) :]
    return read(name if "/versions/" in name else f"{name}/versions/latest")


def deliver(webhook: str, alert: Alert, read: Callable[[str], str] = read_secret) -> Optional[str]:
    """Posts `alert` to the webhook (`webhook_url`); None once delivered, else why not (never raises)."""
    try:
        url = webhook_url(webhook, read)
    except Exception as e:  # noqa: BLE001 - an alert must not turn into the run's error
        reason = f"cannot read its URL from {webhook}: {first_line(str(e))}"
        _log.warning("%s not delivered: %s", alert.kind, reason)
        return reason
    return post(url, alert)


def vertex_failure(tasks: Sequence[Mapping[str, Any]], stages: Mapping[str, str], message: str) -> tuple[str, str]:
    """(stage, first line of its error) of a Vertex AI run, from its task details.

    Args:
      tasks: the run's task details, each {"taskName", "state", "error", "endTime", ...} (`read_task_details`).
      stages: task name -> stage ("train-model" -> "train"); tasks not in it (the DAGs, the exit task) are
        never the failed stage.
      message: the run's final status message, the error when no stage's task failed.
    """
    failed = [t for t in tasks if t["state"] == FAILED and t["taskName"] in stages]
    if not failed:
        return "", first_line(message)
    task = min(failed, key=lambda t: t.get("endTime") or "")  # the first failure; later ones may follow from it
    return stages[task["taskName"]], first_line(task.get("error") or message)


def vertex_warning(tasks: Sequence[Mapping[str, Any]], stages: Mapping[str, str]) -> tuple[str, str]:
    """(stage, warning) of a Vertex AI run that succeeded: the first stage task, in end order, whose outputs
    warned (their "warnings", `read_task_details`); ("", "") when none did."""
    warned = [t for t in tasks if t["taskName"] in stages and t.get("warnings")]
    if not warned:
        return "", ""
    task = min(warned, key=lambda t: t.get("endTime") or "")
    return stages[task["taskName"]], "; ".join(task["warnings"])


def console_link(pipeline_job: str) -> str:
    """The run's page in the Google Cloud console ("" for a name not of that form)."""
    parts = pipeline_job.split("/")
    if len(parts) != 6:
        return ""
    project, location, run = parts[1], parts[3], parts[5]
    return f"https://console.cloud.google.com/vertex-ai/locations/{location}/pipelines/runs/{run}?project={project}"


def alert_vertex_run(
    url: str,
    pipeline: str,
    stages: Mapping[str, str],
    status: Mapping[str, Any],
    read_tasks: Callable[[str], list[dict[str, Any]]] = read_task_details,
) -> Optional[Alert]:
    """Posts the alert of a Vertex AI run that did not succeed (the exit handler's task calls this).

    Args:
      url: the webhook (`webhook_url`).
      pipeline: the pipeline's name.
      stages: task name -> stage (`vertex_failure`).
      status: the run's final status: "state", "pipeline_job_resource_name", "error_message".
      read_tasks: reads the run's task details; when it fails, the alert names no stage and carries the final
        status message.

    Returns:
      The alert posted (whether or not the webhook took it), or None for a run that succeeded with no stage's
      warning (`vertex_warning`).
    """
    job, message = status["pipeline_job_resource_name"], status.get("error_message") or ""
    try:
        tasks = read_tasks(job)
    except Exception as e:  # noqa: BLE001 - an alert without the stage beats none
        _log.warning("cannot read the task details of %s (%s): the alert names no stage", job, first_line(str(e)))
        tasks = []
    if status["state"] == SUCCEEDED:
        stage, warning = vertex_warning(tasks, stages)
        if not warning:
            return None
        alert = Alert(pipeline, job, SUCCEEDED, stage, "", "vertex", console_link(job), warning)
    else:
        stage, error = vertex_failure(tasks, stages, message)
        alert = Alert(pipeline, job, status["state"], stage, error, "vertex", console_link(job))
    deliver(url, alert)
    return alert
