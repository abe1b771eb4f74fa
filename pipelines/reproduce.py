"""`tpu-pipeline reproduce` and `tpu-pipeline diff`: run a recorded run again and prove it, or compare two runs.

A run's record is its summary.json (status, config, metrics, fingerprints) and the manifests it links, one per
stage (`estimator_lib.manifest`: input and output fingerprints, the full config, seeds, versions, machine).

`reproduce` reads the spec each stage of a recorded local run ran from its manifest (the same data, configs and
seed; the baseline and warm-start models it resolved, by path; never today's defaults), runs the pipeline into
another output directory, and compares the two runs stage by stage (`manifest.compare_runs`). The rerun
publishes into a publish root of its own, so reproducing never touches the recorded run's published models. A
Vertex AI run's record (its stages' manifests under the run's pipeline root, no summary.json) is not re-run
here: its parameters and image are written out for a resubmission with `tpu-pipeline submit`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from components import records, registry
from estimator_lib import manifest, storage, vocabulary
from estimator_lib.config import ConfigError, RunConfig
from estimator_lib.config.beam import INPROCESS
from estimator_lib.config.job import settings_read
from estimator_lib.config.run import NO_MODEL
from estimator_lib.config.stages import EvaluateSpec, PredictSpec, PrepareSpec, StageSpecs, TrainSpec
from estimator_lib.fingerprints import file_sha256
from pipelines import checks, local, runs
from pipelines.run_summary import Results, RunSummary, SummaryError
from pipelines.show import printable

# The stages in an order that puts every stage after those it reads from: the first that differs is the cause.
STAGES = registry.STAGES
EXIT_SAME, EXIT_DIFFERENT = 0, 1
RESUBMIT_CONFIG = "resubmit-config.json"


class RecordError(ValueError):
    """What was given is not a run record that can be read, reproduced or compared."""


@dataclasses.dataclass(frozen=True)
class Record:
    """A run's record: where it was read from, its summary (None for a Vertex AI run) and its stage manifests."""

    source: str
    summary: Optional[RunSummary]
    manifests: dict[str, dict[str, Any]]

    @property
    def name(self) -> str:
        return self.summary.run.id if self.summary else self.source

    @property
    def results(self) -> Optional[Results]:
        return self.summary.results if self.summary else None


# -- reading records -----------------------------------------------------------------------------------------
def _vertex_manifests(directory: str) -> dict[str, dict[str, Any]]:
    """The stage manifests anywhere under a Vertex AI run's pipeline root directory, by stage."""
    found = [f for f in storage.list_files(directory) if f.rsplit("/", 1)[-1] == manifest.MANIFEST_FILE]
    return {m["stage"]: m for m in map(manifest.read_manifest, found)}


def read_record(given: str, output: Optional[str] = None) -> Record:
    """The run record `given` names: what `runs.find_summary` finds (a summary.json, a local run's folder, an
    output directory's last run, a run id under `output`), or the pipeline root directory of one Vertex AI run
    (local or gs://), holding its stages' manifests.

    Raises:
      RecordError: nothing there is a run record; the message names what was looked for and what to give.
    """
    try:
        path = runs.find_summary(output, given)
    except runs.RunNotFoundError as e:
        found = _vertex_manifests(given) if storage.exists(given) or storage.is_gcs(given) else {}
        if not found:
            raise RecordError(
                f"{e}; no summary.json and no stage manifest ({manifest.MANIFEST_FILE}) under {given}: give a run's "
                "summary.json, its folder (OUTPUT/runs/<id>), an output directory, or a Vertex AI run's directory "
                "under its pipeline root"
            ) from None
        return Record(given, None, found)
    try:
        summary = RunSummary.read(path)
    except SummaryError as e:
        raise RecordError(str(e)) from None
    return Record(path, summary, _linked_manifests(path, summary))


def _linked_manifests(path: str, summary: RunSummary) -> dict[str, dict[str, Any]]:
    if summary.status != runs.OK:
        raise RecordError(
            f"{path}: run {summary.run.id} ended {summary.status!r}; only a run that ended ok has a complete record "
            "(run it again with run-local to finish it)"
        )
    if summary.results is None:
        raise RecordError(
            f"{path}: this summary links no stage manifests (recorded by a version before manifests were written); "
            "run the pipeline again with this version to get a record that can be reproduced"
        )
    return {stage: _stage_manifest(path, stage, uri) for stage, uri in summary.results.manifests.items()}


MANIFEST_SECTIONS = ("inputs", "config", "versions", "machine", "outputs")  # what reproduce and diff read


def _stage_manifest(path: str, stage: str, uri: str) -> dict[str, Any]:
    """The manifest of `stage` that the summary at `path` links. Raises RecordError naming both files and
    what is wrong: not a stage, not JSON, another stage's, a section that is not an object."""
    where = f"{path}: manifests.{stage} ({uri})"
    if stage not in STAGES:
        raise RecordError(f"{where}: {stage} is not a stage ({', '.join(STAGES)})")
    try:
        found = manifest.read_manifest(uri)
    except ValueError as e:
        raise RecordError(f"{where} is not valid JSON ({e})") from None
    if not isinstance(found, dict) or found.get("stage") != stage:
        raise RecordError(f"{where} is not the {stage} stage's manifest")
    for section in MANIFEST_SECTIONS:
        if not isinstance(found.get(section), dict):
            raise RecordError(f"{where}: its {section} is {json.dumps(found.get(section))[:60]}, not an object")
    for section in ("inputs", "outputs"):
        for name, entry in found[section].items():
            uri = entry.get("uri") if isinstance(entry, dict) else None  # a URI, or the patterns of files read
            if not (
                (isinstance(uri, str) or isinstance(uri, list) and all(isinstance(u, str) for u in uri))
                and "fingerprint" in entry
            ):
                raise RecordError(f"{where}: its {section}.{name} is not an object with a uri and a fingerprint")
    return found


# -- the settings of a recorded run --------------------------------------------------------------------------
def _stage_config(record: Record, stage: str, key: Optional[str] = None) -> Any:
    """The config the stage's manifest records, or its `key`."""
    if stage not in record.manifests:
        raise RecordError(f"{record.source}: the record has no manifest of the {stage} stage")
    config = record.manifests[stage]["config"]
    if key is not None and key not in config:
        raise RecordError(f"{record.source}: the {stage} stage's manifest records no config.{key}")
    return config if key is None else config[key]


def recorded_specs(record: Record) -> StageSpecs:
    """The spec each stage ran, as its manifest records it (decoded by the specs' types; nothing merged)."""
    prepare = _stage_config(record, "prepare")
    predict = record.manifests.get("batch_predict", {})
    engine = predict.get("config", {}).get("engine", INPROCESS)
    return StageSpecs(
        prepare=PrepareSpec.from_dict(
            # "config": the layout of records written before the prepare stage recorded its spec
            {"prepare": prepare.get("prepare", prepare.get("config")), "validation": prepare.get("validation", {})}
        ),
        train=TrainSpec.from_dict({"job": _stage_config(record, "train", "job")}),
        evaluate=EvaluateSpec.from_dict({"blessing": _stage_config(record, "evaluate", "blessing_config")}),
        batch_predict=PredictSpec(data=_predict_data(predict), engine=engine),
    )


def recorded_settings(record: Record, publish_root: str) -> RunConfig:
    """The settings that rerun a recorded run: the specs its stages ran (the job config names the resolved
    warm-start model, if any), the baseline it compared with (by path; "none" when it had none), and
    `publish_root`. Read from the stages' manifests only: neither today's defaults nor the summary's view of the
    settings change them."""
    baseline = _stage_config(record, "evaluate", "baseline") or NO_MODEL
    try:
        return RunConfig.from_specs(recorded_specs(record), publish_root, baseline, warm_start=NO_MODEL)
    except ConfigError as e:
        raise RecordError(f"{record.source}: its stages' manifests record settings that cannot be read: {e}") from None


def resubmission(record: Record) -> dict[str, Any]:
    """What resubmits a Vertex AI run: its image and settings, read from its stages' manifests."""
    settings = recorded_settings(record, _stage_config(record, "release").get("publish_root", ""))
    images = sorted({m["versions"].get("image") or "" for m in record.manifests.values()} - {""})
    return {"image": images[0] if len(images) == 1 else images, "parameters": settings.view()}


def _predict_data(stage_manifest: Mapping[str, Any]) -> str:
    """What batch prediction scored: a prepared split (in its config), or the files it read (an input)."""
    if "data" in stage_manifest.get("config", {}):
        return stage_manifest["config"]["data"]
    files = stage_manifest.get("inputs", {}).get("data")
    return files["uri"][0] if files else "eval"


def resubmit_command(plan: Mapping[str, Any], config_path: str) -> str:
    """The `tpu-pipeline submit` command line that runs the recorded parameters again on the recorded image."""
    p = plan["parameters"]
    image = plan["image"] if isinstance(plan["image"], str) else "REPO@sha256:DIGEST"
    flags = [
        f"--image {image}",
        f"--data {p['data']}",
        f"--label {p['label']}",
        f"--task {p['task']}",
        f"--eval-fraction {p['eval_fraction']}",
        f"--baseline {p['baseline']}",
        f"--predict-data {p['predict_data']}",
        f"--config {config_path}",
    ]
    flags += [f"--key-column {p['key_column']}"] if p["key_column"] else []
    flags += [f"--publish-root {p['publish_root']}"] if p["publish_root"] else []
    return "tpu-pipeline submit " + " ".join(flags) + " --pipeline-root gs://... --project ..."


def resubmit_config(plan: Mapping[str, Any]) -> dict[str, Any]:
    """The --config file of a resubmission: the job config with the blessing, prepare and validation sections."""
    p = plan["parameters"]
    return {
        **p["job_config"],
        "blessing": p["blessing_config"],
        "prepare": p["prepare_options"],
        "validation": p["validation_config"],
    }


# -- verifying a record against its own files ----------------------------------------------------------------
# What the summary says and which stage's record says it first: {summary key: (stage, output artifact)}.
SUMMARY_FINGERPRINTS = {name: registry.BY_NAME[name].stage for name in registry.SUMMARY_FINGERPRINTS}


def _short_hash(value: Any) -> str:
    return f"{value[:12]}..." if isinstance(value, str) and len(value) > 15 else repr(value)


def _outputs_metadata(stage: str, output_uri: str) -> dict[str, Any]:
    """Each output's metadata as the stage recorded it in its stage.json (beside its outputs), {name: metadata}.

    Raises:
      FileNotFoundError: naming the stage.json.
    """
    path = storage.join(records.task_dir(output_uri), records.RECORD_FILE)
    return json.loads(storage.read_text(path)).get("outputs", {})


def _changed_shards(uri: str, metadata: Mapping[str, Any]) -> list[str]:
    """The prediction shards whose sha256 differs from the one the predictions' manifest.json records."""
    recorded = {s["file"]: s["sha256"] for s in metadata.get("manifest", {}).get("shards", [])}
    lines = []
    for shard in metadata.get("shards", []):
        name = posixpath.basename(shard)
        found = file_sha256(shard)
        if name in recorded and recorded[name] != found:
            lines.append(
                f"{name}: its bytes no longer match the recorded sha256 "
                f"(recorded {_short_hash(recorded[name])}, found {_short_hash(found)})"
            )
    return lines


def _verify_output(stage: str, name: str, entry: Mapping[str, Any], metadata: Mapping[str, Any], exported: str):
    """What differs between one output's files and its recorded fingerprint: [] when nothing does."""
    try:
        found = registry.fingerprint(name, entry["uri"], metadata, exported)
        shards = (
            _changed_shards(entry["uri"], metadata) if name == "predictions" and found != entry["fingerprint"] else []
        )
    except FileNotFoundError as e:
        return [f"{stage}: {name}: a file of it is missing ({e})"]
    if found == entry["fingerprint"]:
        return []
    if shards:
        return [f"{stage}: {line}" for line in shards]
    return [
        f"{stage}: {name} ({entry['uri']}): its files no longer match the recorded fingerprint "
        f"(recorded {_short_hash(entry['fingerprint'])}, found {_short_hash(found)})"
    ]


def _verify_stage(record: Record, stage: str) -> list[str]:
    """Every output of a stage computed again from its files and compared with its manifest's fingerprint."""
    outputs = record.manifests[stage]["outputs"]
    exported = record.manifests.get("export", {}).get("outputs", {}).get("exported", {}).get("fingerprint", "")
    try:
        metadata = _outputs_metadata(stage, next(iter(outputs.values()))["uri"]) if outputs else {}
    except FileNotFoundError as e:
        return [f"{stage}: its stage record is missing ({e}); its outputs cannot be checked"]
    found = []
    for name, entry in sorted(outputs.items()):
        if registry.BY_NAME[name].fingerprint is None:  # the report: only its stage computes it
            continue
        if name not in metadata:
            found.append(f"{stage}: {name}: its stage record ({records.RECORD_FILE}) does not describe it")
            continue
        found += _verify_output(stage, name, entry, metadata[name], exported)
    return found


_ABSENT = object()


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    """{dotted key: value} of every leaf of a nested JSON value."""
    if not isinstance(value, Mapping):
        return {prefix: value}
    return {k: v for key, item in value.items() for k, v in _leaves(item, f"{prefix}.{key}").items()}


def _shown(value: Any) -> str:
    return "(absent)" if value is _ABSENT else json.dumps(value, sort_keys=True, default=str)


def _disagreements(field: str, summary_value: Any, stage: str, recorded: Any) -> list[str]:
    """One line per dotted key where the summary's `field` differs from what `stage` recorded."""
    ours, theirs = _leaves(summary_value, field), _leaves(recorded, field)
    return [
        f"{runs.SUMMARY_FILE}: {key} {_shown(ours.get(key, _ABSENT))} differs from the {stage} stage's record "
        f"{_shown(theirs.get(key, _ABSENT))}"
        for key in sorted(set(ours) | set(theirs))
        if ours.get(key, _ABSENT) != theirs.get(key, _ABSENT)
    ]


def _verify_summary(record: Record) -> list[str]:
    """The summary against its stages' records: the output fingerprints, the eval metrics (the evaluate stage's
    Metrics artifact), the candidate's metrics (its blessing) and the job config (the train stage's spec)."""
    results, found = record.results, []
    for name, stage in SUMMARY_FINGERPRINTS.items():
        recorded = record.manifests.get(stage, {}).get("outputs", {}).get(name, {}).get("fingerprint")
        found += _disagreements(f"fingerprints.{name}", results.fingerprints.get(name), stage, recorded)
    if "evaluate" in record.manifests:
        outputs = record.manifests["evaluate"]["outputs"]
        try:
            evaluated = _outputs_metadata("evaluate", outputs["metrics"]["uri"])
        except (FileNotFoundError, KeyError):
            evaluated = {}  # _verify_stage names what is missing
        if evaluated:
            metrics = {k: v for k, v in evaluated["metrics"].items() if k != "blessed"}
            found += _disagreements("metrics", results.metrics, "evaluate", metrics)
            candidate = evaluated["blessing"]["candidate_metrics"]
            found += _disagreements(
                "blessing.candidate_metrics", results.blessing.candidate_metrics, "evaluate", candidate
            )
    if "train" in record.manifests:
        job = record.manifests["train"]["config"].get("job")
        job = settings_read(job) if job is not None else None  # what the summary shows
        found += _disagreements("config.job_config", record.summary.config.get("job_config"), "train", job)
    return found


def verify_record(record: Record) -> list[str]:
    """What in a local run's record no longer matches its own files, one line each naming the stage, the file or
    field, what was recorded and what is there: every stage's outputs computed again from their files (as the
    stage computed them) against its manifest, then the summary against the stages' records. [] when all match."""
    found = []
    for stage in STAGES:
        if stage in record.manifests:
            found += _verify_stage(record, stage)
    return found + _verify_summary(record)


# -- reproducing ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Reproduction:
    """A recorded run checked against its own files (`verify_record`), then its rerun, compared stage by stage."""

    record: Record
    outcome: local.Outcome
    stages: list[manifest.StageComparison]
    unverified: list[str] = dataclasses.field(default_factory=list)

    @property
    def identical(self) -> bool:
        rerun_same = self.outcome.exit_code == local.EXIT_OK and bool(self.stages) and all(s.same for s in self.stages)
        return rerun_same and not self.unverified

    @property
    def first_difference(self) -> Optional[manifest.StageComparison]:
        return next((s for s in self.stages if not s.same), None)


def reproduce(record: Record, output: str, verbose: bool = False) -> Reproduction:
    """Checks a recorded local run's files against its record (`verify_record`), then runs it again into OUTPUT
    (a new run; its own publish root) and compares each stage's output fingerprints with the record's.

    The rerun happens even when the files disagree with the record: it says whether the record itself (the
    stages' manifests) is reproducible, which tells a changed file from a changed record."""
    output = os.path.abspath(output)
    publish_root = os.path.join(output, local.PUBLISH_DIR)
    if publish_root == record.summary.config.get("publish_root"):
        raise RecordError(
            f"--output {output}: the recorded run publishes into {publish_root}, and a rerun there would publish "
            "beside it; give the rerun another --output"
        )
    settings = recorded_settings(record, publish_root)
    checks.local_run(settings)
    unverified = verify_record(record)
    outcome = local.run_local(settings, output, verbose=verbose, resume=False)
    if outcome.exit_code != local.EXIT_OK:
        return Reproduction(record, outcome, [], unverified)
    rerun = _linked_manifests(outcome.folder.summary_path, outcome.summary)
    return Reproduction(record, outcome, manifest.compare_runs(record.manifests, rerun, STAGES), unverified)


def _verification_lines(result: Reproduction) -> list[str]:
    if not result.unverified:
        return [f"recorded run {result.record.name}: its files match its record (every stage's outputs, the summary)"]
    count = len(result.unverified)
    return [
        f"recorded run {result.record.name}: {count} difference{'s' if count > 1 else ''} between its files and "
        "its record:",
        *(f"  {line}" for line in result.unverified),
    ]


def format_reproduction(result: Reproduction) -> str:
    """The report: what in the record no longer matches its files, one line per stage of the rerun, then the
    verdict naming the first stage that differs and what differs (or that the record does not match its files)."""
    rerun = result.outcome.summary
    lines = _verification_lines(result)
    lines.append(f"recorded run {result.record.name} against its rerun {rerun.run.id} ({result.outcome.folder.path}):")
    if not result.stages:
        error = f"{rerun.stage}: {rerun.error}"
        return "\n".join(map(printable, [*lines, f"  the rerun did not finish ({error}); see {rerun.run.log}"]))
    lines += [f"  {s.line()}" for s in result.stages]
    first = result.first_difference
    if first is not None:
        lines.append(f"not reproduced: the first stage that differs is {first.stage} ({first.differs})")
    elif result.unverified:
        lines.append(
            f"not reproduced: the recorded run's files or summary were changed after it ran ({result.unverified[0]}"
            + (f"; and {len(result.unverified) - 1} more above)" if len(result.unverified) > 1 else ")")
            + "; its stages' records are reproduced by the rerun"
        )
    else:
        lines.append(f"reproduced: every stage's outputs have the recorded fingerprints ({len(result.stages)} stages)")
    return "\n".join(map(printable, lines))


# -- comparing two runs ---------------------------------------------------------------------------------------
# What `diff` compares, in the order it reports it. A stage's inputs other than prepare's (the data) are outputs
# of the stages before it, so each artifact is compared once, as the output of the stage that wrote it.
DIFF_SECTIONS = ("data", "config", "versions", "machine", "metrics", "verdict", "artifacts")
OUTPUT_MARK, RUN_MARK = "<output>", "<run>"
FINGERPRINT_CHARS = 12  # enough to tell two fingerprints apart on a screen
VERDICT_CHARS = 110


def diff_records(a: Record, b: Record) -> dict[str, list[str]]:
    """What differs between two runs' records, by `DIFF_SECTIONS`: the data (prepare's input fingerprints and
    the split counts), each stage's config (`manifest.NOT_COMPARED` left out, each run's output folder and run id
    written as <output> and <run>), versions and machine, the eval metrics (with their deltas), the verdict and
    every artifact's fingerprint. A difference shared by several stages is one line naming them.
    {section: ["key: a -> b (stages)", ...]}; every list empty: equivalent."""
    out: dict[str, list[str]] = {section: [] for section in DIFF_SECTIONS}
    out["data"] = manifest.differences(_data(a), _data(b))
    per_stage: dict[str, dict[str, list[str]]] = {"config": {}, "versions": {}, "machine": {}, "artifacts": {}}
    both = [stage for stage in STAGES if stage in a.manifests and stage in b.manifests]
    for stage in STAGES:
        if (stage in a.manifests) != (stage in b.manifests):
            out["artifacts"].append(f"{stage}: only {a.name if stage in a.manifests else b.name} has this stage")
    for stage in both:
        for section, x, y in _stage_sections(a, a.manifests[stage], b, b.manifests[stage]):
            for line in manifest.differences(x, y):
                per_stage[section].setdefault(line, []).append(stage)
    for section, lines in per_stage.items():
        where = {line: "every stage" if stages == both else ", ".join(stages) for line, stages in lines.items()}
        out[section] += [f"{line} ({where[line]})" for line in lines]
    out["metrics"] = metric_differences(*(r.results.metrics if r.results else {} for r in (a, b)))
    out["verdict"] = _verdict_differences(a, b)
    return out


def _data(record: Record) -> dict[str, Any]:
    data = record.results.data if record.results else None
    fingerprints = _fingerprints(record.manifests.get("prepare", {}), "inputs")
    return {"inputs": fingerprints, "rows": data and data.rows, "counts": data and data.counts}


def _verdict_differences(a: Record, b: Record) -> list[str]:
    """Each run's verdict line (blessed or not, and why) when the two differ."""
    verdicts = [(r.results.blessed, r.results.blessing.summary) if r.results else (None, None) for r in (a, b)]
    if verdicts[0] == verdicts[1]:
        return []
    return [f"{r.name}: {_clipped(str(summary))}" for r, (_, summary) in zip((a, b), verdicts)]


def _clipped(text: str) -> str:
    return text if len(text) <= VERDICT_CHARS else text[: VERDICT_CHARS - 3] + "..."


def _stage_sections(a: Record, left: Mapping[str, Any], b: Record, right: Mapping[str, Any]) -> list[tuple]:
    """(section, A's value, B's value) of one stage's record, run-local paths and ids masked in its config."""
    configs = [_run_neutral(r, _compared_config(m.get("config", {}))) for r, m in ((a, left), (b, right))]
    return [
        ("config", *configs),
        ("versions", left.get("versions", {}), right.get("versions", {})),
        ("machine", left.get("machine", {}), right.get("machine", {})),
        ("artifacts", _fingerprints(left, "outputs"), _fingerprints(right, "outputs")),
    ]


def _compared_config(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in manifest.NOT_COMPARED}


def _run_neutral(record: Record, value: Any) -> Any:
    """`value` with the record's output folder and run id in its strings masked: where a run wrote is not what
    it computed."""
    if record.summary is None:
        return value
    run = record.summary.run
    output, run_id = os.path.dirname(os.path.dirname(run.dir)), run.id

    def mask(item: Any) -> Any:
        if isinstance(item, str):
            return item.replace(output, OUTPUT_MARK).replace(run_id, RUN_MARK)
        if isinstance(item, Mapping):
            return {k: mask(v) for k, v in item.items()}
        if isinstance(item, list):
            return [mask(v) for v in item]
        return item

    return mask(value)


def _fingerprints(stage_manifest: Mapping[str, Any], section: str) -> dict[str, Any]:
    """{name: fingerprint, shortened} of a stage's inputs or outputs."""
    entries = stage_manifest.get(section, {})
    return {name: str(entry.get("fingerprint"))[:FINGERPRINT_CHARS] for name, entry in entries.items()}


def metric_differences(a: Mapping[str, float], b: Mapping[str, float]) -> list[str]:
    """One line per metric whose value differs: "auc: 0.9787 -> 0.9812 (+0.0025)", rounded for people; the
    per-class metrics ("auc/Adelie") counted in one line."""
    lines, per_class = [], 0
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x == y:
            continue
        if "/" in name:
            per_class += 1
        elif x is None or y is None:
            shown = [vocabulary.format_value(v) if v is not None else "(absent)" for v in (x, y)]
            lines.append(f"{name}: {shown[0]} -> {shown[1]}")
        else:
            delta = vocabulary.format_delta(y - x)
            lines.append(f"{name}: {vocabulary.format_value(x)} -> {vocabulary.format_value(y)} ({delta})")
    if per_class:
        lines.append(f"and {per_class} per-class metric{'s' if per_class > 1 else ''} (tpu-pipeline show lists them)")
    return lines


def format_diff(a: Record, b: Record, found: Mapping[str, Sequence[str]]) -> str:
    """ "equivalent" and what was compared, or each differing section with its lines."""
    compared = ", ".join(section.replace("artifacts", "artifact fingerprints") for section in found)
    if not any(found.values()):
        return printable(f"{a.name} and {b.name} are equivalent: same {compared}")
    differing = [section for section, lines in found.items() if lines]
    lines = [f"{a.name} and {b.name} differ in {', '.join(differing)} (compared: {compared})"]
    for section in differing:
        lines.append(f"{section}:")
        lines += [f"  {line}" for line in found[section]]
    return "\n".join(map(printable, lines))


def write_resubmission(record: Record, output: str) -> str:
    """Writes a Vertex AI run's config file for a resubmission into OUTPUT; returns the report: the recorded
    image and parameters, and the submit command that runs them again."""
    plan = resubmission(record)
    os.makedirs(output, exist_ok=True)
    config_path = os.path.join(os.path.abspath(output), RESUBMIT_CONFIG)
    storage.write_text(config_path, json.dumps(resubmit_config(plan), indent=2, sort_keys=True) + "\n")
    lines = [
        f"Vertex AI run {record.source}: not re-run here; its recorded image and parameters:",
        *json.dumps(plan, indent=2, sort_keys=True).split("\n"),
        f"resubmit it with (config written to {config_path}):",
        f"  {resubmit_command(plan, config_path)}",
    ]
    return "\n".join(map(printable, lines))
