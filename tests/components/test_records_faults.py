"""A stage record keys the data a stage read by its content: data edited in place keeping its size and modification
time (as `cp -p`, `rsync -t` and archive extraction leave it) is prepared again, never reused."""

from __future__ import annotations

import os

from kfp.dsl import Dataset, Markdown

from components.prepare import prepare_data
from estimator_lib.config import PrepareConfig
from estimator_lib.config.stages import PrepareSpec


def rows(labels: str) -> str:
    return "x,label\n" + "".join(f"{i * 0.5},{labels[i % 2]}\n" for i in range(80))


def prepare(tmp_path, data: str) -> Dataset:
    spec = PrepareSpec(PrepareConfig(data=(data,), label="label", eval_fraction=0.25, num_workers=1))
    dataset = Dataset(name="dataset", uri=str(tmp_path / "dataset" / "dataset"), metadata={})
    validation = Markdown(name="validation", uri=str(tmp_path / "dataset" / "validation"), metadata={})
    prepare_data(spec.to_json(indent=None), "v1", "none", dataset, validation)
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
