"""The component image as Vertex AI runs it, built and run here without a Docker engine.

`scripts/build-image.sh --variant cpu --base local` builds the CPU variant of the image (Debian's Python 3.11 on a
base made by debootstrap, tensorflow-cpu from the package index) with buildah. Then every stage's container
`command` and `args` are read from the pipeline YAML compiled for that image (`compile --cpu`: all five stages are
plain containers) and run inside it in DAG order, each in a fresh container, as the image's own user (uid 1000),
without a network, with an executor input written here in the KFP v2 format Vertex AI substitutes for `{{$}}`
and a bind-mounted work directory for the artifacts. Each stage's outputs are checked on the host.

Slow: the first build makes the Debian base and downloads about 300 MB of wheels (about 6 minutes here); later
builds reuse the base, the wheelhouse and the layers kept under ~/.cache/tpu-pipeline-image
($TPU_PIPELINE_IMAGE_CACHE). Skipped, saying why, where buildah, debootstrap or root are missing
(`scripts/install-image-tools.sh` installs the tools; CI runs it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from typing import Any, Dict, List, NamedTuple, Optional

import pytest
import yaml
from repo import ROOT

from estimator_lib.config import JobConfig
from estimator_lib.config.stages import TrainSpec

pytestmark = pytest.mark.slow


CACHE = os.environ.get("TPU_PIPELINE_IMAGE_CACHE") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tpu-pipeline-image"
)
IMAGE = "localhost/tpu-pipeline-test:cpu"
# A commit-tag reference for the compiled YAML (compile refuses mutable tags); the containers run IMAGE.
COMPILED_IMAGE = "localhost/tpu-pipeline-test:0000000"
WORK = "/mnt/pipeline"  # the bind-mounted work directory, as the stages see it
UID = 1000
TRAIN_STEPS = 20
PENGUINS = 344
STAGE_TIMEOUT = 600


def _skip_reason() -> Optional[str]:
    missing = [tool for tool in ("buildah", "debootstrap") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (bash scripts/install-image-tools.sh, as root)"
    if os.geteuid() != 0:
        return "building the Debian base with debootstrap and running buildah's chroot isolation need root"
    return None


def _overlay_works(scratch: str) -> bool:
    """Whether this kernel lets us mount overlayfs (else buildah's storage falls back to vfs, slower and larger)."""
    dirs = {name: os.path.join(scratch, name) for name in ("lower", "upper", "work", "merged")}
    for path in dirs.values():
        os.makedirs(path, exist_ok=True)
    options = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    mounted = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, dirs["merged"]], capture_output=True)
    if mounted.returncode == 0:
        subprocess.run(["umount", dirs["merged"]], check=True)
    shutil.rmtree(scratch, ignore_errors=True)
    return mounted.returncode == 0


class Buildah:
    """buildah on a storage of the test's own under CACHE, so that nothing depends on the machine's default one."""

    def __init__(self) -> None:
        driver = os.environ.get("STORAGE_DRIVER") or (
            "overlay" if _overlay_works(os.path.join(CACHE, "overlay-probe")) else "vfs"
        )
        storage = os.path.join(CACHE, "containers", driver)
        os.makedirs(storage, exist_ok=True)
        conf = os.path.join(storage, "storage.conf")
        with open(conf, "w", encoding="utf-8") as f:
            f.write(f'[storage]\ndriver = "{driver}"\ngraphroot = "{storage}/graph"\nrunroot = "{storage}/run"\n')
        self.env = {**os.environ, "CONTAINERS_STORAGE_CONF": conf, "TPU_PIPELINE_IMAGE_CACHE": CACHE}
        self.env.pop("STORAGE_DRIVER", None)
        self.driver = driver
        # Without a network of its own, a stage shows it needs none (chroot isolation shares the caller's).
        self.offline = ["unshare", "--net"] if subprocess.run(["unshare", "--net", "true"]).returncode == 0 else []

    def __call__(self, *args: str, timeout: int = 300) -> str:
        proc = subprocess.run(["buildah", *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        assert proc.returncode == 0, f"buildah {' '.join(args[:3])} failed:\n{proc.stderr[-3000:]}"
        return proc.stdout

    def run(self, container: str, argv: List[str], mounts: Dict[str, str] = None, timeout: int = STAGE_TIMEOUT):
        volumes = [arg for host, inside in (mounts or {}).items() for arg in ("--volume", f"{host}:{inside}")]
        command = [*self.offline, "buildah", "run", "--isolation", "chroot", *volumes, container, "--", *argv]
        return subprocess.run(command, capture_output=True, text=True, env=self.env, timeout=timeout)

    def container(self, image: str) -> str:
        return self("from", "--name", f"tpu-pipeline-test-{uuid.uuid4().hex[:8]}", image).strip()


@pytest.fixture(scope="module")
def buildah():
    reason = _skip_reason()
    if reason:
        pytest.skip(f"cannot build the image here: {reason}")
    tool = Buildah()
    stale = [
        name for name in tool("containers", "--format", "{{.ContainerName}}").split() if "tpu-pipeline-test" in name
    ]
    if stale:  # left by an interrupted run
        tool("rm", *stale)
    return tool


@pytest.fixture(scope="module")
def image(buildah):
    """The CPU image, built by the script users run; yields (reference, build seconds, the script's last line)."""
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", "scripts/build-image.sh", "--variant", "cpu", "--base", "local", "--tag", IMAGE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=buildah.env,
        timeout=3600,
    )
    seconds = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    buildah("rmi", "--prune")  # earlier runs' images; the current one's layers stay as the next build's cache
    return IMAGE, seconds, proc.stdout.strip().splitlines()[-1]


def run_in_container(buildah: Buildah, image: str, argv: List[str]) -> subprocess.CompletedProcess:
    """Runs `argv` in a fresh container of `image`, removed afterwards."""
    container = buildah.container(image)
    try:
        return buildah.run(container, argv)
    finally:
        buildah("rm", container)


def python_in_container(buildah: Buildah, image: str, script: str) -> Any:
    """The JSON value the last line of `python -c script`'s output holds, run in a fresh container of `image`."""
    proc = run_in_container(buildah, image, ["python", "-c", script])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def rootfs(buildah, image):
    """The image's file system, mounted read-only for inspection on the host."""
    container = buildah.container(image[0])
    try:
        yield buildah("mount", container).strip()
    finally:
        buildah("rm", container)


# -- the image ---------------------------------------------------------------------------------------------------
def test_build_reports_time_and_size(image):
    _, seconds, last_line = image
    assert re.fullmatch(rf"build-image: built {re.escape(IMAGE)} in \d+s, [\d.]+ [GM]B", last_line), last_line
    print(f"\n{last_line} (test measured {seconds:.0f}s)")


def test_image_runs_as_uid_1000_by_default(buildah, image):
    config = json.loads(buildah("inspect", "--type", "image", image[0]))["OCIv1"]["config"]
    assert config["User"] == "pipeline"
    proc = run_in_container(buildah, image[0], ["sh", "-c", "id -u; id -g; echo $HOME"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(UID), str(UID), "/home/pipeline"]


def test_image_has_no_compilers_pip_cache_apt_lists_or_build_secrets(buildah, image, rootfs):
    for directory in ("usr/bin", "usr/local/bin", "opt/venv/bin"):
        tools = set(os.listdir(os.path.join(rootfs, directory)))
        compilers = sorted(t for t in tools if re.fullmatch(r"(.*-)?(gcc|g\+\+|cc|c\+\+|clang|clang\+\+)(-[\d.]+)?", t))
        assert not compilers, f"/{directory} has compilers {compilers}"
    for cache in ("root/.cache", "home/pipeline/.cache"):
        assert not os.path.exists(os.path.join(rootfs, cache)), f"/{cache} is in the image"
    assert _listing(rootfs, "var/lib/apt/lists") <= {"lock", "partial", "auxfiles"}
    assert _listing(rootfs, "run/secrets") == set()  # buildah leaves the empty mount point
    for pip_conf in ("etc/pip.conf", "root/.config/pip", "root/.pip", "opt/venv/pip.conf", "wheelhouse", "tmp/wheels"):
        assert not os.path.exists(os.path.join(rootfs, pip_conf)), f"/{pip_conf} is in the image"
    env = json.loads(buildah("inspect", "--type", "image", image[0]))["OCIv1"]["config"]["Env"]
    assert not [e for e in env if e.split("=")[0] in ("PIP_CERT", "PIP_CONFIG_FILE", "PIP_INDEX_URL", "SSL_CERT_FILE")]
    for cert in _host_only_certificates(rootfs):  # the host's own CA (a proxy's, say) reached the build only
        for bundle in _ca_bundles(rootfs):
            with open(bundle, encoding="ascii", errors="replace") as f:
                assert cert not in f.read(), f"the host's CA certificate is in {bundle}"


def _listing(rootfs: str, directory: str) -> set:
    path = os.path.join(rootfs, directory)
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def _certificates(text: str) -> List[str]:
    return re.findall(r"-----BEGIN CERTIFICATE-----\n(.*?)-----END CERTIFICATE-----", text, re.S)


def _ca_bundles(rootfs: str) -> List[str]:
    bundles = []
    for top in ("etc/ssl", "opt/venv/lib", "usr/lib/python3", "usr/share/ca-certificates"):
        for directory, _, files in os.walk(os.path.join(rootfs, top)):
            bundles += [os.path.join(directory, f) for f in files if f.endswith((".pem", ".crt"))]
    return bundles


def _host_only_certificates(rootfs: str) -> List[str]:
    """Certificates in the host's CA bundle that Debian's own bundle (the image's) does not have."""
    host_bundle = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
    if not os.path.isfile(host_bundle):
        return []
    with open(host_bundle, encoding="ascii", errors="replace") as f:
        host = set(_certificates(f.read()))
    with open(os.path.join(rootfs, "etc/ssl/certs/ca-certificates.crt"), encoding="ascii", errors="replace") as f:
        image = set(_certificates(f.read()))
    return sorted(host - image)


def test_image_tensorflow_is_the_cpu_build_2_15_with_estimator(buildah, image):
    script = (
        "import json, os, importlib.metadata as m, tensorflow as tf; "
        "print(json.dumps([tf.__version__, m.version('tensorflow-estimator'), m.version('kfp'), "
        "os.path.exists('/lib/libtpu.so'), m.version('google-cloud-pipeline-components')]))"
    )
    tensorflow, estimator, kfp, libtpu, gcpc = python_in_container(buildah, image[0], script)
    assert tensorflow.startswith("2.15.") and estimator == "2.15.0" and kfp.startswith("2.13.")
    assert libtpu is False and gcpc


def test_image_holds_the_dataflow_extras_beam_and_boots_through_its_worker_program(buildah, image, rootfs):
    """`--engine beam` on Vertex AI: the stage launches Dataflow with the image's Beam ([gcp], the dataflow extra's
    version), and Dataflow starts its workers through the entrypoint. This local build has no Beam SDK image to
    copy the boot program from (--beam-sdk none), so only its place is checked here."""
    config = json.loads(buildah("inspect", "--type", "image", image[0]))["OCIv1"]["config"]
    assert config["Entrypoint"] == ["/opt/apache/beam/boot"]
    assert os.path.isdir(os.path.join(rootfs, "opt/apache/beam"))
    script = (
        "import json, importlib.metadata as m, apache_beam, apache_beam.io.gcp.gcsio, "
        "apache_beam.runners.dataflow.dataflow_runner; print(json.dumps(apache_beam.__version__))"
    )
    version = python_in_container(buildah, image[0], script)
    lower = re.search(r'dataflow = \["apache-beam\[gcp\]>=([\d.]+),', _read_pyproject()).group(1)
    assert version.startswith(lower + ".")


def test_image_prepares_on_beam_as_in_process(buildah, image):
    """The image's Beam (the dataflow extra's, with [gcp]) runs the Beam preparation to the in-process bytes."""
    script = (
        "import json, tempfile\n"
        "from estimator_lib.config import PrepareConfig\n"
        "from estimator_lib.config.beam import BeamConfig\n"
        "from estimator_lib.data import beam, embedded, prepare\n"
        "work = tempfile.mkdtemp()\n"
        "config = PrepareConfig(data=(embedded.resolve_data('embedded:penguins'),), label='species')\n"
        "ours = prepare.prepare(config, work + '/inprocess')\n"
        "theirs = beam.prepare_on_beam(config, work + '/beam', BeamConfig(temp_location=work))\n"
        "print(json.dumps([ours.manifest['fingerprint'], theirs.manifest['fingerprint']]))\n"
    )
    inprocess, on_beam = python_in_container(buildah, image[0], script)
    assert on_beam == inprocess


def _read_pyproject() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return f.read()


def test_image_compiles_the_tpu_pipeline(buildah, image):
    """The Vertex AI libraries are in the image too (google-cloud-pipeline-components' TPU custom-job wrapper)."""
    digest = "r@sha256:" + "0" * 64
    argv = ["tpu-pipeline", "compile", "--tpu", "v3-8", "--image", digest, "--output", "/tmp/p.yaml"]
    proc = run_in_container(buildah, image[0], argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train/evaluate/batch predict on TPU v3-8" in proc.stdout


# -- the pipeline's stages, run as Vertex AI runs them ------------------------------------------------------------
def compiled_pipeline(directory: str) -> Dict[str, Any]:
    from pipelines.pipeline import compile_pipeline

    path = compile_pipeline(os.path.join(directory, "pipeline.yaml"), COMPILED_IMAGE, None)
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def dag_order(spec: Dict[str, Any]) -> List[str]:
    tasks = spec["root"]["dag"]["tasks"]
    order: List[str] = []
    while len(order) < len(tasks):
        ready = sorted(t for t in tasks if t not in order and set(tasks[t].get("dependentTasks", [])) <= set(order))
        assert ready, f"the DAG has a cycle among {sorted(set(tasks) - set(order))}"
        order.append(ready[0])
    return order


def pipeline_arguments(spec: Dict[str, Any], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """The pipeline's parameter values: the compiled defaults, then `overrides` (what a PipelineJob sends)."""
    definitions = spec["root"]["inputDefinitions"]["parameters"]
    values = {name: d["defaultValue"] for name, d in definitions.items() if "defaultValue" in d}
    values.update(overrides)
    missing = sorted(set(definitions) - set(values))
    assert not missing, f"required pipeline parameters without a value: {missing}"
    return values


def executor_input(
    spec: Dict[str, Any], task: str, arguments: Dict[str, Any], upstream: Dict[str, Dict[str, Any]]
) -> Dict[str, Any]:
    """The KFP v2 ExecutorInput (JSON form) for `task`, as kfp's own runners build it (kfp/local/
    executor_input_utils.py): input parameter values and artifacts, output artifacts with their URIs (under WORK)
    and the file the executor writes its output metadata to."""
    dag_task = spec["root"]["dag"]["tasks"][task]
    component = spec["components"][dag_task["componentRef"]["name"]]
    parameter_types = {k: v["parameterType"] for k, v in component["inputDefinitions"].get("parameters", {}).items()}
    parameters = {}
    for name, source in dag_task["inputs"].get("parameters", {}).items():
        if "componentInputParameter" in source:
            value = arguments[source["componentInputParameter"]]
        elif "taskOutputParameter" in source:  # an upstream task's output parameter (the resolve stage's)
            producer = source["taskOutputParameter"]
            value = upstream[producer["producerTask"]][producer["outputParameterKey"]]
        else:
            value = source["runtimeValue"]["constant"]
        parameters[name] = int(value) if parameter_types[name] == "NUMBER_INTEGER" else value
    artifacts = {}
    for name, source in dag_task["inputs"].get("artifacts", {}).items():
        producer = source["taskOutputArtifact"]
        artifacts[name] = {"artifacts": [upstream[producer["producerTask"]][producer["outputArtifactKey"]]]}
    outputs = {
        name: {"artifacts": [{"name": name, "type": d["artifactType"], "uri": f"{WORK}/{task}/{name}", "metadata": {}}]}
        for name, d in component.get("outputDefinitions", {}).get("artifacts", {}).items()
    }
    output_parameters = {
        name: {"outputFile": f"{WORK}/{task}/parameters/{name}"}
        for name in component.get("outputDefinitions", {}).get("parameters", {})
    }
    return {
        "inputs": {"parameterValues": parameters, "artifacts": artifacts},
        "outputs": {
            "artifacts": outputs,
            "parameters": output_parameters,
            "outputFile": f"{WORK}/{task}/executor_output.json",
        },
    }


def container_argv(spec: Dict[str, Any], task: str, executor: Dict[str, Any]) -> List[str]:
    """The task's container command + args from the compiled YAML, with `{{$}}` replaced by the executor input."""
    component = spec["components"][spec["root"]["dag"]["tasks"][task]["componentRef"]["name"]]
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
    assert container["image"] == COMPILED_IMAGE
    argv = [*container["command"], *container["args"]]
    others = sorted({p for arg in argv for p in re.findall(r"\{\{\$[^}]*\}\}", arg)} - {"{{$}}"})
    assert not others, f"{task} uses placeholders this test does not fill: {others}"
    return [arg.replace("{{$}}", json.dumps(executor)) for arg in argv]


def produced_artifacts(executor: Dict[str, Any], host_work: str) -> Dict[str, Any]:
    """The task's output artifacts with the metadata its executor wrote, and its output parameters' values (what
    the next tasks receive)."""
    output_file = executor["outputs"]["outputFile"].replace(WORK, host_work, 1)
    with open(output_file, encoding="utf-8") as f:
        output = json.load(f)
    written = output.get("artifacts", {})
    produced: Dict[str, Any] = dict(output.get("parameterValues", {}))
    for name, listed in executor["outputs"]["artifacts"].items():
        artifact = dict(listed["artifacts"][0])
        artifact["metadata"] = written.get(name, {}).get("artifacts", [{}])[0].get("metadata", {})
        produced[name] = artifact
    return produced


class StageRuns(NamedTuple):
    work: str  # the host directory mounted at WORK
    outputs: Dict[str, Dict[str, Any]]  # {task: {output name: artifact (uri under WORK, metadata)}}, in run order
    seconds: Dict[str, float]

    def host_path(self, uri: str) -> str:
        assert uri.startswith(WORK + "/"), uri
        return self.work + uri[len(WORK) :]


@pytest.fixture(scope="module")
def stages(buildah, image, tmp_path_factory) -> StageRuns:
    """Runs every stage's container from the compiled YAML in the image, in DAG order."""
    host_work = str(tmp_path_factory.mktemp("image-work"))
    os.chown(host_work, UID, UID)  # the stages write as the image's user, as they would to Vertex AI's /gcs
    spec = compiled_pipeline(str(tmp_path_factory.mktemp("compiled")))
    # A fixed step budget: the train stage's spec with training.train_steps set (the other specs: the defaults).
    budget = TrainSpec(JobConfig().with_overrides({"training.train_steps": TRAIN_STEPS})).to_json(indent=None)
    arguments = pipeline_arguments(spec, {"publish_root": f"{WORK}/published", "train_spec": budget})
    runs = StageRuns(host_work, {}, {})
    for task in dag_order(spec):
        executor = executor_input(spec, task, arguments, runs.outputs)
        container = buildah.container(image[0])  # a fresh container per task, as on Vertex AI
        start = time.monotonic()
        try:
            proc = buildah.run(container, container_argv(spec, task, executor), {host_work: WORK})
        finally:
            buildah("rm", container)
        assert proc.returncode == 0, f"{task} failed in the image:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        runs.outputs[task] = produced_artifacts(executor, host_work)
        runs.seconds[task] = time.monotonic() - start
    return runs


def test_stages_run_in_dag_order(stages):
    assert list(stages.outputs) == [
        "resolve-inputs",
        "prepare-data",
        "train-model",
        "evaluate-model",
        "batch-predict",  # after evaluate: it compares its predictions with the eval rows' evaluate returned
        "export-model",
        "check-serving",
        "release-model",
        "record-run-cost",  # no Vertex AI run to read here: its record says so
    ]
    print("\n" + ", ".join(f"{task} {seconds:.1f}s" for task, seconds in stages.seconds.items()))


def test_prepare_stage_splits_the_embedded_penguins(stages):
    dataset = stages.outputs["prepare-data"]["dataset"]
    counts = dataset["metadata"]["counts"]
    assert counts["train"] + counts["valid"] + counts["eval"] == PENGUINS and counts["eval"] > 0
    assert dataset["metadata"]["schema_uri"] == f"{dataset['uri']}/schema.json"
    schema = stages.host_path(dataset["metadata"]["schema_uri"])
    assert os.path.isfile(schema) and os.stat(schema).st_uid == UID  # written by the unprivileged user


def test_train_stage_writes_a_checkpoint_at_the_requested_step(stages):
    model = stages.outputs["train-model"]["model"]
    assert model["metadata"]["global_step"] == TRAIN_STEPS
    assert os.path.isfile(stages.host_path(model["metadata"]["checkpoint"]) + ".index")


def test_evaluate_stage_reports_metrics_and_a_verdict(stages):
    outputs = stages.outputs["evaluate-model"]
    accuracy = outputs["metrics"]["metadata"]["accuracy"]
    assert 0.0 <= accuracy <= 1.0
    assert os.path.isfile(os.path.join(stages.host_path(outputs["blessing"]["uri"]), "blessing.json"))
    assert isinstance(outputs["blessing"]["metadata"]["blessed"], bool)
    with open(stages.host_path(outputs["report"]["uri"]), encoding="utf-8") as f:  # matplotlib works in the image
        assert f.read().count('src="data:image/png;base64,') >= 3
    assert os.path.isfile(stages.host_path(outputs["verdict"]["uri"]))


def test_batch_predict_stage_scores_every_eval_row(stages):
    predictions = stages.outputs["batch-predict"]["predictions"]
    eval_rows = stages.outputs["prepare-data"]["dataset"]["metadata"]["counts"]["eval"]
    assert predictions["metadata"]["count"] == eval_rows
    rows = []
    for shard in predictions["metadata"]["shards"]:
        with open(stages.host_path(shard), encoding="utf-8") as f:
            rows += [json.loads(line) for line in f]
    assert len(rows) == eval_rows and len({r["key"] for r in rows}) == eval_rows


def test_export_stage_writes_a_savedmodel_with_cpu_and_tpu_graphs(stages):
    from tensorflow.core.protobuf import saved_model_pb2

    exported = stages.outputs["export-model"]["exported"]
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(stages.host_path(exported["metadata"]["export_dir"]), "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    tag_sets = sorted(sorted(g.meta_info_def.tags) for g in saved_model.meta_graphs)
    assert tag_sets == [["serve"], ["serve", "tpu"]]
    assert sorted(sorted(t) for t in exported["metadata"]["tag_sets"]) == tag_sets
