"""The artifact registry (components/registry.py): it names every output the stage components write, and each
fingerprint function covers what its stage's describer says it covers."""

from __future__ import annotations

import inspect
import typing

from kfp.dsl import Output

import components
from components import registry
from estimator_lib.fingerprints import fingerprint_files

STAGE_FUNCTIONS = {
    "prepare": components.prepare_data,
    "train": components.train_model,
    "evaluate": components.evaluate_model,
    "batch_predict": components.batch_predict,
    "export": components.export_model,
    "serving_check": components.check_serving,
    "release": components.release_model,
}


def _outputs(function) -> list:
    hints = typing.get_type_hints(function, include_extras=True)
    return sorted(name for name in inspect.signature(function).parameters if "Output" in str(hints[name]))


def test_the_registry_names_every_output_of_every_stage_and_nothing_else():
    assert registry.STAGES == tuple(STAGE_FUNCTIONS)
    for stage, function in STAGE_FUNCTIONS.items():
        assert _outputs(function) == sorted(a.name for a in registry.ARTIFACTS if a.stage == stage), stage
    assert Output  # the annotation the stages' outputs carry
    assert sorted(registry.HEADLINE) == sorted(registry.STAGES)


def test_the_summary_lists_the_stages_headline_artifacts_with_the_report_and_verdict_after_evaluate():
    keys = [key for key, _ in registry.SUMMARY_ARTIFACTS]
    assert keys == [
        "prepare",
        "train",
        "evaluate",
        "report",
        "verdict",
        "batch_predict",
        "export",
        "serving_check",
        "release",
    ]
    assert registry.SUMMARY_FINGERPRINTS == ("dataset", "model", "blessing", "predictions", "exported", "publication")


def test_the_report_is_fingerprinted_only_by_its_stage():
    try:
        registry.fingerprint("report", "/nowhere", {})
    except ValueError as e:
        assert "only its stage computes it" in str(e)
    else:
        raise AssertionError("the report's fingerprint was computed from files")


def test_the_blessing_fingerprint_covers_its_slices_and_importance_files(tmp_path):
    uri = str(tmp_path)
    (tmp_path / "blessing.json").write_text('{"blessed": true}')
    assert registry.blessing_files(uri) == [f"{uri}/blessing.json"]
    alone = fingerprint_files(registry.blessing_files(uri), uri)
    (tmp_path / "slices.json").write_text('{"slices": []}')
    (tmp_path / "importance.json").write_text('{"permutation": []}')
    assert registry.blessing_files(uri) == [f"{uri}/blessing.json", f"{uri}/slices.json", f"{uri}/importance.json"]
    with_tables = fingerprint_files(registry.blessing_files(uri), uri)
    (tmp_path / "slices.json").write_text('{"slices": [1]}')
    assert len({alone, with_tables, fingerprint_files(registry.blessing_files(uri), uri)}) == 3
