"""Prepare's stage record keys the data by the resolve stage's content token (`data_version`), computed once per
run: data edited in place keeping its size and modification time (as `cp -p`, `rsync -t` and archive extraction
leave it) gets a new token and is prepared again, never reused; on the same token prepare reads no data file to
tell it is unchanged."""

from __future__ import annotations

import os

from kfp.dsl import Dataset, Markdown

from components.prepare import prepare_data
from estimator_lib import fingerprints
from estimator_lib.config import PrepareConfig
from estimator_lib.config.stages import PrepareSpec


def rows(labels: str) -> str:
    return "x,label\n" + "".join(f"{i * 0.5},{labels[i % 2]}\n" for i in range(80))


def prepare(tmp_path, data: str) -> Dataset:
    """Prepare, given the data's content token as the resolve stage computes it (`release.resolve_sources`)."""
    spec = PrepareSpec(PrepareConfig(data=(data,), label="label", eval_fraction=0.25, num_workers=1))
    version = fingerprints.content_token(spec.prepare.reads())
    dataset = Dataset(name="dataset", uri=str(tmp_path / "dataset" / "dataset"), metadata={})
    validation = Markdown(name="validation", uri=str(tmp_path / "dataset" / "validation"), metadata={})
    prepare_data(spec.to_json(indent=None), version, "none", dataset, validation)
    return dataset


def test_data_edited_keeping_its_size_and_mtime_is_prepared_again(tmp_path, capsys):
    data = tmp_path / "data.csv"
    data.write_text(rows("ab"))
    first = prepare(tmp_path, str(data))
    stat = os.stat(data)
    data.write_text(rows("ba"))  # the labels swapped: the same size
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    capsys.readouterr()
    again = prepare(tmp_path, str(data))
    assert "[stage reused]" not in capsys.readouterr().out
    assert again.metadata["fingerprint"] != first.metadata["fingerprint"]


def test_prepare_reused_on_the_same_data_version_hashes_no_data_file(tmp_path, capsys, monkeypatch):
    data = tmp_path / "data.csv"
    data.write_text(rows("ab"))
    spec = PrepareSpec(PrepareConfig(data=(str(data),), label="label", eval_fraction=0.25, num_workers=1))
    version = fingerprints.content_token([str(data)])
    outputs = {name: str(tmp_path / "dataset" / name) for name in ("dataset", "validation")}
    first = Dataset(name="dataset", uri=outputs["dataset"], metadata={})
    prepare_data(spec.to_json(indent=None), version, "none", first, Markdown(uri=outputs["validation"]))
    hashed = []
    monkeypatch.setattr(fingerprints, "file_sha256", lambda path: hashed.append(path) or "")
    capsys.readouterr()
    again = Dataset(name="dataset", uri=outputs["dataset"], metadata={})
    prepare_data(spec.to_json(indent=None), version, "none", again, Markdown(uri=outputs["validation"]))
    assert capsys.readouterr().out.startswith("[stage reused] prepare: ")
    assert hashed == [] and again.metadata == first.metadata
