"""Each component through its Python function, in-process, with artifacts made by hand (tiny real data, real
TensorFlow). The adapter and artifacts modules alone are in test_adapter.py and test_artifacts.py; the whole DAG
through the KFP local runner is in tests/e2e/."""

from __future__ import annotations

import csv
import json
import os
import re

import pytest
import tensorflow as tf
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model
from report_checks import assert_complete_report
from saved_models import tampered

from components import adapter, build_stages, records
from components.artifact_types import ModelBlessing
from components.batch_predict import batch_predict
from components.evaluate import evaluate_model
from components.export import export_model
from components.prepare import prepare_data
from components.release import release_model
from components.resolve import resolve_inputs
from components.serving_check import check_serving
from components.train import train_model
from estimator_lib import fingerprints, manifest, release, vocabulary
from estimator_lib.config import BlessingConfig, JobConfig, PrepareConfig, ValidationConfig
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, TrainSpec
from estimator_lib.predict.serving_check import ServingCheckError

CPU = '{"use_tpu": false}'  # the placement the pipeline gives a CPU stage
JOB = JobConfig().with_overrides(
    {
        "tpu.strict": True,
        "training.save_checkpoints_steps": 100,
        "training.train_steps": 40,
        "model.family": "linear",
        "model.hidden_units": [8],
        "training.optimizer.learning_rate": 0.05,
        "training.train_batch_size": 32,
        "training.seed": 1,
    }
)
# The train stage's parameters (besides its dataset and publish root), as the pipeline passes them.
TRAIN = {"spec": TrainSpec(JOB).to_json(indent=None), "tpu": CPU, "warm_start": "none", "blessing_metrics": "[]"}
# What the prepare stage gets from the resolve stage on a first run (nothing published yet).
FIRST_RUN = {"data_version": "v1", "reference": "none"}
# The prepare stage's validation checks when a test does not name them: the defaults.
DEFAULT_VALIDATION = ValidationConfig()


def prepare_spec(data: str, validation: ValidationConfig = DEFAULT_VALIDATION, **options) -> str:
    """The prepare stage's spec parameter for `data` (label "label", a quarter of the rows in eval)."""
    config = PrepareConfig(data=(data,), label="label", eval_fraction=0.25, **options)
    return PrepareSpec(config, validation).to_json(indent=None)


def evaluate_spec(**blessing) -> str:
    return EvaluateSpec(BlessingConfig(**blessing)).to_json(indent=None)


def write_csv(path: str, n: int = 160) -> str:
    import synthetic

    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["x 1", "x-2", "colour", "label"])
        for row in synthetic.make_rows(n, 3, "binary"):
            writer.writerow(["" if row[c] is None else row[c] for c in ("x 1", "x-2", "colour", "target")])
    return path


def artifact(cls, directory, name, task=None):
    """An output artifact as KFP makes one: `directory/<task>/<name>` (the task directory holds stage.json)."""
    return cls(name=name, uri=os.path.join(str(directory), task or name, name), metadata={})


def evaluated(work, dataset: Dataset, model: Model, **blessing) -> dict:
    """The evaluate component's outputs for `model` (no baseline; `blessing`: the BlessingConfig's settings),
    and under "eval_predictions" what it returned."""
    outputs = dict(
        metrics=artifact(Metrics, work, "metrics", "evaluate"),
        classification_metrics=artifact(ClassificationMetrics, work, "cm", "evaluate"),
        blessing=artifact(ModelBlessing, work, "blessing", "evaluate"),
        report=artifact(HTML, work, "report", "evaluate"),
        verdict=artifact(Markdown, work, "verdict", "evaluate"),
        slice_metrics=artifact(Metrics, work, "slice_metrics", "evaluate"),
    )
    spec = evaluate_spec(**blessing)
    returned = evaluate_model(
        dataset=dataset,
        model=model,
        spec=spec,
        baseline="none",
        publish_root=str(work / "published"),
        tpu=CPU,
        **outputs,
    )
    return {**outputs, "eval_predictions": returned}


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """prepare -> train -> evaluate -> batch predict -> export -> release, each called as its component function
    (each in a task directory of its own, as KFP gives them)."""
    work = tmp_path_factory.mktemp("stages")
    data = write_csv(str(work / "data.csv"))
    dataset = artifact(Dataset, work, "dataset")
    prepare_data(
        spec=prepare_spec(data, num_workers=1, num_shards=2),
        **FIRST_RUN,
        dataset=dataset,
        validation=artifact(Markdown, work, "validation", "dataset"),
    )
    model = artifact(Model, work, "model")
    train_model(dataset=dataset, **TRAIN, publish_root=str(work / "published"), model=model)
    metrics, cmetrics, blessing = (
        artifact(Metrics, work, "metrics", "evaluate"),
        artifact(ClassificationMetrics, work, "cm", "evaluate"),
        artifact(ModelBlessing, work, "blessing", "evaluate"),
    )
    report, verdict = artifact(HTML, work, "report", "evaluate"), artifact(Markdown, work, "verdict", "evaluate")
    predicted = evaluate_model(
        dataset=dataset,
        model=model,
        spec=evaluate_spec(thresholds={"accuracy": 0.5}),
        baseline="latest",
        publish_root=str(work / "published"),
        tpu=CPU,
        metrics=metrics,
        classification_metrics=cmetrics,
        blessing=blessing,
        report=report,
        verdict=verdict,
        slice_metrics=artifact(Metrics, work, "slice_metrics", "evaluate"),
    )
    predictions = artifact(Dataset, work, "predictions")
    spec = PredictSpec("eval").to_json(indent=None)
    batch_predict(dataset=dataset, model=model, spec=spec, tpu=CPU, eval_predictions=predicted, predictions=predictions)
    exported = artifact(Model, work, "exported")
    export_model(dataset=dataset, model=model, tpu=CPU, exported=exported)
    publication = artifact(Artifact, work, "publication")
    release_model(exported=exported, blessing=blessing, publish_root=str(work / "published"), publication=publication)
    return dict(
        work=work,
        dataset=dataset,
        model=model,
        metrics=metrics,
        cmetrics=cmetrics,
        blessing=blessing,
        report=report,
        verdict=verdict,
        predictions=predictions,
        exported=exported,
        publication=publication,
    )


def test_prepare_describes_the_dataset(stages):
    meta = stages["dataset"].metadata
    assert meta["counts"]["train"] + meta["counts"]["valid"] + meta["counts"]["eval"] == 160
    assert meta["task"] == "classification" and meta["classes"] == ["no", "yes"] and meta["label"] == "label"
    assert os.path.exists(meta["schema_uri"])
    assert meta["fingerprint"] == fingerprints.fingerprint_directory(stages["dataset"].uri)
    assert len(os.listdir(os.path.join(stages["dataset"].uri, "train"))) == 2  # num_shards arrived as the int 2


def test_prepare_on_a_first_run_infers_the_schema_and_skips_validation(stages):
    validation = stages["dataset"].metadata["validation"]
    assert validation["status"] == "skipped" and validation["breaches"] == []
    with open(validation["report_uri"], encoding="utf-8") as f:
        assert f.read().startswith("# Data validation\n\n**skipped**")


def test_resolve_gives_the_data_version_and_the_published_model(stages, tmp_path):
    published = release.latest(str(stages["work"] / "published"))
    data = write_csv(str(tmp_path / "data.csv"), n=80)
    root = str(stages["work"] / "published")
    first = resolve_inputs(prepare_spec(data), "latest", "latest", root, evaluate_spec())
    assert (first.warm_start, first.reference) == (published.uri, published.uri)
    cold = resolve_inputs(prepare_spec(data), "none", "latest", root, evaluate_spec())
    assert (cold.warm_start, cold.reference, cold.data_version) == ("none", published.uri, first.data_version)
    write_csv(data, n=81)  # new content at the same path: a new version, so a cached prepare is not reused
    changed = resolve_inputs(prepare_spec(data), "none", "none", root, evaluate_spec())
    assert changed.data_version != first.data_version
    assert changed.reference == "none"  # no model asked for: plain none, the same dataset bytes however it was asked


def test_prepare_against_the_published_model_continues_its_schema_and_checks_the_data(stages, tmp_path):
    published = release.latest(str(stages["work"] / "published"))
    dataset, validation = artifact(Dataset, tmp_path, "dataset"), artifact(Markdown, tmp_path, "validation", "dataset")
    prepare_data(
        spec=prepare_spec(
            write_csv(str(tmp_path / "data.csv"), n=160), ValidationConfig(on_breach="warn"), num_workers=1
        ),
        data_version="v2",
        reference=published.uri,
        dataset=dataset,
        validation=validation,
    )
    outcome = dataset.metadata["validation"]
    assert outcome["status"] in ("passed", "warned") and outcome["reference"] == published.uri
    assert validation.metadata["status"] == outcome["status"]
    with open(outcome["details_uri"], encoding="utf-8") as f:  # every figure, in a file inside the Dataset
        details = json.load(f)
    assert outcome["details_uri"] == os.path.join(dataset.uri, "validation.json") and details["findings"]
    assert set(details["drift"]) and outcome["breach_count"] == len(details["breaches"]) and "drift" not in outcome
    # validation.json included
    assert dataset.metadata["fingerprint"] == fingerprints.fingerprint_directory(dataset.uri)
    with open(os.path.join(dataset.uri, "manifest.json"), encoding="utf-8") as f:
        assert json.load(f)["schema_source"] == "reference"


def test_train_uses_the_artifact_uri_as_model_dir_and_records_the_config(stages):
    model = stages["model"]
    assert model.metadata["global_step"] == 40
    assert model.metadata["checkpoint"] == os.path.join(model.uri, "best", "model.ckpt-40")  # kept by validation
    job = JobConfig.from_dict(model.metadata["config"])
    assert job.model.family == "linear" and job.model.hidden_units == (8,) and job.training.seed == 1
    assert job.tpu.strict is True and job.training.warm_start_from is None
    with open(os.path.join(model.uri, adapter.JOB_CONFIG_FILE), encoding="utf-8") as f:
        assert JobConfig.from_json(f.read()) == job


def test_evaluate_logs_metrics_confusion_matrix_roc_and_blessing(stages):
    metrics = stages["metrics"].metadata
    assert {"accuracy", "auc", "log_loss", "blessed"} <= set(metrics) and metrics["blessed"] == 1.0
    assert not set(metrics) & set(vocabulary.RETIRED)  # the Vertex AI Metrics artifact: one name per metric
    cm = stages["cmetrics"].metadata
    assert [a["displayName"] for a in cm["confusionMatrix"]["annotationSpecs"]] == ["no", "yes"]
    rows = [r["row"] for r in cm["confusionMatrix"]["rows"]]
    eval_count = stages["dataset"].metadata["counts"]["eval"]
    assert sum(map(sum, rows)) == eval_count
    assert (rows[0][0] + rows[1][1]) / eval_count == pytest.approx(metrics["accuracy"])
    assert len(cm["confidenceMetrics"]) == 101
    verdict = adapter.read_blessing(stages["blessing"].uri)
    assert verdict.blessed and [c.name for c in verdict.checks] == ["trivial", "threshold", "reference"]
    assert stages["blessing"].metadata["baseline_uri"] == ""  # "latest" with nothing published: no baseline
    importance = stages["blessing"].metadata["importance"]  # the top 10; every feature in importance.json
    with open(importance["uri"], encoding="utf-8") as f:
        ranked = json.load(f)["permutation"]
    assert importance["metric"] == "accuracy" and importance["permutation"] == ranked[:10] and ranked


def test_evaluate_writes_the_html_report_and_the_markdown_verdict(stages):
    report, verdict = stages["report"], stages["verdict"]
    with open(report.uri, encoding="utf-8") as f:
        document = f.read()
    assert_complete_report(document, classification=True)
    assert "label (classification): model at step 40" in document
    assert stages["dataset"].metadata["fingerprint"] in document  # the run's fingerprints
    with open(verdict.uri, encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("# label (classification): model at step 40\n\n**Blessed**: blessed: every check holds")
    assert "| metric | candidate | reference |" in text
    for artifact_ in (report, verdict):
        assert artifact_.metadata["blessed"] is True and artifact_.metadata["summary"].startswith("blessed")
    assert stages["blessing"].metadata["blessed"] is True


def test_the_report_tells_the_runs_story(stages):
    """The header names the run (the directory of its tasks) and its data; the curves and the worst rows come
    from the model directory and the prepared dataset; a worst row's input line holds its values."""
    with open(stages["report"].uri, encoding="utf-8") as f:
        document = f.read()
    header = document[document.index('<section id="header">') : document.index("</section>")]
    assert f"<tr><td>run</td><td>{os.path.basename(stages['work'])}</td></tr>" in header
    assert "<tr><td>data</td><td>data.csv (160 rows)</td></tr>" in header and "<td>linear family</td>" in header
    assert "prepare, train, evaluate until this report" in header
    assert "The evaluated model is the checkpoint of step 40, the lowest validation loss." in document
    rows = re.findall(r"<tr><td>([^<]+)</td><td>data\.csv line (\d+)</td><td>(no|yes)</td>", document)
    assert len(rows) == 10
    with open(stages["work"] / "data.csv", encoding="utf-8", newline="") as f:
        lines = f.read().splitlines()
    for _, line, label in rows:
        assert lines[int(line) - 1].endswith("," + label)


def test_batch_predict_export_and_release(stages):
    predictions = stages["predictions"].metadata
    assert predictions["count"] == stages["dataset"].metadata["counts"]["eval"]
    assert all(os.path.exists(s) for s in predictions["shards"])
    exported = stages["exported"].metadata
    assert exported["tag_sets"] == [["serve"], ["serve", "tpu"]] and exported["global_step"] == 40
    assert stages["blessing"].metadata["based_on"] == "none"  # nothing was published when it was evaluated
    publication = stages["publication"].metadata
    latest = release.latest(str(stages["work"] / "published"))
    assert publication["published"] is True and latest.uri == publication["published_uri"]
    assert latest.fingerprint == exported["files_fingerprint"] and publication["based_on"] == "none"
    assert latest.metadata["source"]["global_step"] == 40


def test_the_serving_check_records_what_it_compared_and_refuses_a_tampered_export(stages, tmp_path):
    checked = artifact(Artifact, tmp_path, "checked", "serving")
    check_serving(exported=stages["exported"], predictions=stages["predictions"], checked=checked)
    meta = checked.metadata
    count = stages["dataset"].metadata["counts"]["eval"]
    assert meta["rows_checked"] == min(64, count) and meta["signatures"] == ["predict", "raw:predict"]
    assert sorted(meta["max_abs_diff"]["raw:predict"]) == ["class_ids", "probabilities"]
    assert (meta["rtol"], meta["atol"]) == (1e-5, 1e-6) and os.path.exists(meta["record_uri"])
    assert read_manifest(checked)["inputs"]["exported"]["fingerprint"] == stages["exported"].metadata["fingerprint"]

    export_dir = stages["exported"].metadata["export_dir"]
    variables = os.path.join(export_dir, "variables", "variables")
    [bias] = [name for name, _ in tf.train.list_variables(variables) if name.endswith("/bias")]
    copy = tampered(export_dir, str(tmp_path), bias, 0.5)
    bad = Model(name="exported", uri=stages["exported"].uri, metadata={**stages["exported"].metadata})
    bad.metadata.update(export_dir=copy, fingerprint="tampered")
    refused = artifact(Artifact, tmp_path, "checked", "refused")
    with pytest.raises(ServingCheckError, match=r"signature 'predict' output 'probabilities' served \["):
        check_serving(exported=bad, predictions=stages["predictions"], checked=refused)
    assert not os.path.exists(os.path.join(refused.uri, "serving_check.json"))


def test_evaluate_scores_the_published_baseline_with_the_same_code(stages, tmp_path):
    """The candidate against its own published export: same weights, same rows, same metric code."""
    root = str(stages["work"] / "published")
    metrics, cmetrics, blessing = (
        artifact(Metrics, tmp_path, "m", "evaluate"),
        artifact(ClassificationMetrics, tmp_path, "cm", "evaluate"),
        artifact(ModelBlessing, tmp_path, "b", "evaluate"),
    )
    report, markdown = artifact(HTML, tmp_path, "r", "evaluate"), artifact(Markdown, tmp_path, "v", "evaluate")
    sliced = artifact(Metrics, tmp_path, "s", "evaluate")
    # As prepare describes data it validated against a published model's: the report shows its drift table.
    details = tmp_path / "validation.json"  # as prepare writes it inside the Dataset
    details.write_text(json.dumps({"drift": {"island": {"distance (PSI)": 0.0123, "unseen share": 0.0456}}}))
    dataset = Dataset(name="dataset", uri=stages["dataset"].uri, metadata={**stages["dataset"].metadata})
    dataset.metadata["validation"] = {"status": "passed", "details_uri": str(details)}
    evaluate_model(
        dataset=dataset,
        model=stages["model"],
        spec=evaluate_spec(min_improvement=0.01, slices=("colour",)),
        baseline="latest",
        publish_root=root,
        tpu=CPU,
        metrics=metrics,
        classification_metrics=cmetrics,
        blessing=blessing,
        report=report,
        verdict=markdown,
        slice_metrics=sliced,
    )
    verdict = adapter.read_blessing(blessing.uri)
    assert verdict.baseline_uri == release.latest(root).uri
    assert verdict.baseline_metrics == pytest.approx(verdict.candidate_metrics, abs=1e-6)
    assert not verdict.blessed
    # the candidate is the published model itself
    assert verdict.reasons == (f"identical to version {release.latest(root).version}; nothing to publish",)
    assert metrics.metadata["blessed"] == 0.0
    assert os.path.exists(os.path.join(blessing.uri, "baseline", "manifest.json"))
    with open(report.uri, encoding="utf-8") as f:
        document = f.read()
    columns = "<th>candidate</th><th>baseline (last published)</th><th>candidate - baseline</th>"
    assert columns in document and "<th>reference</th>" in document
    drift = document.split("Drift against the last published model's data</h2>")[1].split("</table>")[0]
    assert "<td>island</td>" in drift and "0.0123" in drift and "0.0456" in drift
    shown = blessing.metadata["slices"]
    with open(shown["uri"], encoding="utf-8") as f:
        table = json.load(f)
    names = sorted(e["name"] for e in table["slices"])
    assert names == ["colour=blue", "colour=green", "colour=red"] and shown["count"] == 3 and shown["failed"] == []
    assert sum(e["rows"] for e in table["slices"]) == verdict.num_examples
    rows = {e["name"]: e["rows"] for e in table["slices"]}
    assert {n: sliced.metadata[f"{n}/rows"] for n in names} == rows  # and each metric the slice defines
    assert {k: v for k, v in sliced.metadata.items() if k.endswith("/accuracy")} == {
        f"{e['name']}/accuracy": e["metrics"]["accuracy"] for e in table["slices"]
    }


def test_evaluate_with_baseline_none_says_which_published_version_it_replaces_and_how_they_compare(stages, tmp_path):
    root = str(stages["work"] / "published")
    published = release.latest(root)
    blessing = artifact(ModelBlessing, tmp_path, "b", "evaluate")
    evaluate_model(
        dataset=stages["dataset"],
        model=stages["model"],
        spec=evaluate_spec(),
        baseline="none",
        publish_root=root,
        tpu=CPU,
        metrics=artifact(Metrics, tmp_path, "m", "evaluate"),
        classification_metrics=artifact(ClassificationMetrics, tmp_path, "cm", "evaluate"),
        blessing=blessing,
        report=artifact(HTML, tmp_path, "r", "evaluate"),
        verdict=artifact(Markdown, tmp_path, "v", "evaluate"),
        slice_metrics=artifact(Metrics, tmp_path, "s", "evaluate"),
    )
    verdict = adapter.read_blessing(blessing.uri)
    recorded = published.metadata["blessing"]
    assert verdict.replaces == {
        "version": published.version,
        "why": "--baseline none",
        "metrics": recorded["candidate_metrics"],
        "num_examples": recorded["num_examples"],
    }
    ours, theirs = verdict.candidate_metrics["accuracy"], recorded["candidate_metrics"]["accuracy"]
    assert blessing.metadata["summary"].endswith(
        f"replaces version {published.version} without comparing (--baseline none): accuracy {ours:.4f} here, "
        f"{theirs:.4f} recorded for it, each on its own run's eval rows ({recorded['num_examples']} then, "
        f"{verdict.num_examples} now), which need not be the same rows"
    )


def read_manifest(output: Artifact) -> dict:
    return manifest.read_manifest(records.manifest_uri(output.uri))


def test_every_stage_writes_its_manifest_beside_its_outputs(stages):
    dataset, model, exported = stages["dataset"], stages["model"], stages["exported"]
    prepared = read_manifest(dataset)
    assert prepared["stage"] == "prepare" and prepared["config"]["prepare"]["label"] == "label"
    files = prepared["inputs"]["files"]
    assert files["uri"] == [str(stages["work"] / "data.csv")] and len(files["files"]) == 1
    with open(os.path.join(dataset.uri, "manifest.json"), encoding="utf-8") as f:
        assert files["fingerprint"] == json.load(f)["input_fingerprint"]
    assert prepared["outputs"]["dataset"] == {"uri": dataset.uri, "fingerprint": dataset.metadata["fingerprint"]}
    assert set(prepared["outputs"]) == {"dataset", "validation"}
    trained = read_manifest(model)
    assert trained["inputs"] == {"dataset": {"uri": dataset.uri, "fingerprint": dataset.metadata["fingerprint"]}}
    assert trained["config"] == {"job": model.metadata["config"]} and trained["seeds"] == {"job.training.seed": 1}
    assert trained["machine"]["kind"] == "CPU" and trained["started"] <= trained["ended"]
    assert trained["versions"]["tensorflow"].startswith("2.15.") and trained["versions"]["kfp"].startswith("2.13.")
    assert trained["versions"]["commit"] == manifest.git_commit(records.PACKAGE_DIR)
    evaluated = read_manifest(stages["blessing"])
    assert set(evaluated["inputs"]) == {"dataset", "model"}
    assert set(evaluated["outputs"]) == {
        "metrics",
        "classification_metrics",
        "blessing",
        "report",
        "verdict",
        "slice_metrics",
    }
    assert evaluated["config"]["blessing_config"]["thresholds"] == {"accuracy": 0.5}
    assert read_manifest(exported)["outputs"]["exported"]["fingerprint"] == exported.metadata["fingerprint"]
    released = read_manifest(stages["publication"])
    assert released["inputs"]["exported"]["fingerprint"] == exported.metadata["fingerprint"]
    assert read_manifest(stages["predictions"])["config"]["data"] == "eval"


def test_two_exports_of_one_model_have_one_fingerprint(stages, tmp_path):
    """Exported again (another folder, another time): saved_model.pb names its lookup tables at random and
    export_metadata.json records the paths, so the files differ; the graphs and variables do not."""
    again = artifact(Model, tmp_path, "exported", "export")
    export_model(dataset=stages["dataset"], model=stages["model"], tpu=CPU, exported=again)
    first = stages["exported"].metadata
    assert again.metadata["export_dir"] != first["export_dir"]
    assert again.metadata["files_fingerprint"] != first["files_fingerprint"]
    assert again.metadata["fingerprint"] == first["fingerprint"]

    # Released on a blessing against the version its first export became: the same model, not published again.
    root = str(stages["work"] / "published")
    before = release.latest(root)
    verdict = adapter.read_blessing(stages["blessing"].uri)
    publication = artifact(Artifact, tmp_path, "publication")
    blessing = blessing_artifact(tmp_path, verdict, before.version)
    release_model(exported=again, blessing=blessing, publish_root=root, publication=publication)
    reason = f"not published: identical to version {before.version}; nothing to publish"
    assert publication.metadata["published"] is False and publication.metadata["publish_reason"] == reason
    with open(os.path.join(publication.uri, adapter.PUBLICATION_FILE)) as f:
        assert json.load(f) == {"published": None, "reason": reason, "based_on": before.version}
    assert release.latest(root) == before and os.listdir(os.path.join(root, "versions")) == [before.version]


def blessing_artifact(directory, verdict, based_on: str) -> Artifact:
    blessing = artifact(Artifact, directory, "blessing", "evaluate")
    os.makedirs(blessing.uri)
    with open(os.path.join(blessing.uri, adapter.BLESSING_FILE), "w") as f:
        f.write(verdict.to_json())
    blessing.metadata.update({"based_on": based_on, "fingerprint": verdict.summary()})
    return blessing


def test_an_unblessed_model_is_not_published(stages, tmp_path):
    verdict = adapter.read_blessing(stages["blessing"].uri)
    refused = type(verdict)(**{**verdict.__dict__, "blessed": False})
    publication = artifact(Artifact, tmp_path, "publication")
    root = str(tmp_path / "published")
    blessing = blessing_artifact(tmp_path, refused, "none")
    release_model(exported=stages["exported"], blessing=blessing, publish_root=root, publication=publication)
    assert publication.metadata["published"] is False and publication.metadata["published_uri"] == ""
    assert publication.metadata["publish_reason"].startswith("not published: not blessed")
    assert not os.path.exists(root)


def test_release_refuses_when_latest_moved_after_the_evaluation(stages, tmp_path):
    """The fixture's model was evaluated when nothing was published ("none"); its own release has published
    since. Another model released on a verdict against "none" would overwrite a LATEST its evaluation never saw."""
    root = str(stages["work"] / "published")
    before = release.latest(root)
    export_dir = stages["exported"].metadata["export_dir"]
    [bias] = [n for n, _ in tf.train.list_variables(os.path.join(export_dir, "variables", "variables")) if "bias" in n]
    other = Model(name="exported", uri=stages["exported"].uri, metadata={**stages["exported"].metadata})
    other.metadata.update(export_dir=tampered(export_dir, str(tmp_path), bias, 0.5), fingerprint="other")
    verdict = adapter.read_blessing(stages["blessing"].uri)
    publication = artifact(Artifact, tmp_path, "publication")
    with pytest.raises(release.PublishConflictError, match="but this run was evaluated against 'none'"):
        release_model(
            exported=other,
            blessing=blessing_artifact(tmp_path, verdict, "none"),
            publish_root=root,
            publication=publication,
        )
    assert release.latest(root) == before


# -- stage records: a stage run again on the same inputs -----------------------------------------------------
def test_a_stage_run_again_on_the_same_inputs_reuses_its_output(stages, tmp_path, capsys):
    data = write_csv(str(tmp_path / "data.csv"), n=80)
    args = dict(spec=prepare_spec(data, num_workers=1))
    args.update(FIRST_RUN, validation=artifact(Markdown, tmp_path, "validation", "dataset"))
    first = artifact(Dataset, tmp_path, "dataset")
    prepare_data(**args, dataset=first)
    schema_time = os.path.getmtime(first.metadata["schema_uri"])
    capsys.readouterr()
    again = artifact(Dataset, tmp_path, "dataset")
    prepare_data(**args, dataset=again)
    assert again.metadata == first.metadata
    assert os.path.getmtime(first.metadata["schema_uri"]) == schema_time  # not rewritten
    assert capsys.readouterr().out.startswith("[stage reused] prepare: inputs unchanged since ")
    write_csv(data, n=100)  # the data changed: the resolve stage's token too, so it is prepared again
    args["data_version"] = "v2"
    changed = artifact(Dataset, tmp_path, "dataset")
    prepare_data(**args, dataset=changed)
    assert sum(changed.metadata["counts"].values()) == 100 != sum(first.metadata["counts"].values())


def interrupted_training(dataset: Dataset, reference: Model, model: Model) -> None:
    """The train stage's attempt on the reference model's inputs into `model`, killed after its step-20
    checkpoint: a started record, and the checkpoints up to step 20."""
    from estimator_lib import estimator
    from estimator_lib.data import prepare
    from estimator_lib.model import inputs

    job = JobConfig.from_dict(reference.metadata["config"])
    records.StageRecord(
        "train", {"model": model}, {"dataset": dataset.metadata["fingerprint"], "job": job.to_dict()}
    ).begin()
    prepared = prepare.load_prepared(dataset.uri)
    files, training = prepared.files("train"), job.training
    attempt = inputs.train_input_fn_builder(
        files, prepared.schema, training.seed, training.shuffle_buffer_size, model.uri
    )
    estimator.build_estimator(job, prepared.schema, model.uri).train(attempt, max_steps=20)


def test_training_interrupted_after_a_checkpoint_continues_to_the_same_variables(stages, tmp_path):
    """An attempt on the same inputs that was killed after its step-20 checkpoint: train_model continues from
    it and ends with the model of the uninterrupted fixture run, byte for byte. Other inputs start afresh."""
    dataset, reference = stages["dataset"], stages["model"]
    model = artifact(Model, tmp_path, "model", "train")
    interrupted_training(dataset, reference, model)
    params = {**TRAIN, "dataset": dataset, "publish_root": str(tmp_path / "published")}
    train_model(**params, model=model)
    assert model.metadata["global_step"] == 40
    assert model.metadata["fingerprint"] == reference.metadata["fingerprint"]
    other = artifact(Model, tmp_path, "model", "train")
    reseeded = TrainSpec(JOB.with_overrides({"training.seed": 2})).to_json(indent=None)
    train_model(**{**params, "spec": reseeded}, model=other)  # other inputs: the old checkpoints are deleted first
    assert other.metadata["fingerprint"] != reference.metadata["fingerprint"]
    assert not os.path.exists(os.path.join(other.uri, "model.ckpt-20.index"))


def test_a_retry_in_fresh_directories_continues_the_runs_interrupted_attempt_to_the_same_variables(stages, tmp_path):
    """A retried task Vertex AI gives new output directories: train_model copies in the checkpoints of the run's
    attempt on the same inputs (killed after step 20) and ends with the uninterrupted fixture run's model."""
    dataset, reference = stages["dataset"], stages["model"]
    interrupted_training(dataset, reference, artifact(Model, tmp_path, "model", "train-model_1"))
    retry = artifact(Model, tmp_path, "model", "train-model_2")
    train_model(**TRAIN, dataset=dataset, publish_root=str(tmp_path / "published"), model=retry)
    assert os.path.exists(os.path.join(retry.uri, "model.ckpt-20.index"))  # adopted, then trained on
    assert retry.metadata["global_step"] == 40
    assert retry.metadata["fingerprint"] == reference.metadata["fingerprint"]


def test_components_are_lightweight_on_the_given_image():
    stages = build_stages("gcr.io/p/img@sha256:" + "0" * 64)
    for component in (
        stages.resolve,
        stages.prepare,
        stages.train,
        stages.evaluate,
        stages.batch_predict,
        stages.export,
        stages.serving_check,
        stages.release,
    ):
        container = component.component_spec.implementation.container
        assert container.image == "gcr.io/p/img@sha256:" + "0" * 64
        assert "pip install" not in " ".join(container.command)
        assert "from estimator_lib" in container.command[-1]  # imports inside the shipped body
