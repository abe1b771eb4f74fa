"""TensorBoard event files are copied from the model directory to where Vertex AI TensorBoard uploads from."""

from __future__ import annotations

import os

from estimator_lib import summaries


def test_copy_event_files_takes_the_event_files_of_one_directory(tmp_path):
    model_dir = tmp_path / "model"
    (model_dir / "eval").mkdir(parents=True)
    (model_dir / "events.out.tfevents.1.host").write_bytes(b"train-1")
    (model_dir / "events.out.tfevents.2.host").write_bytes(b"train-2")
    (model_dir / "model.ckpt-10.index").write_bytes(b"ckpt")
    (model_dir / "eval" / "events.out.tfevents.3.host").write_bytes(b"eval")
    log_dir = tmp_path / "logs"

    copies = summaries.copy_event_files(str(model_dir), str(log_dir / "train"))
    assert copies == [str(log_dir / "train" / f"events.out.tfevents.{i}.host") for i in (1, 2)]
    assert (log_dir / "train" / "events.out.tfevents.2.host").read_bytes() == b"train-2"
    assert sorted(os.listdir(log_dir / "train")) == ["events.out.tfevents.1.host", "events.out.tfevents.2.host"]

    summaries.copy_event_files(str(model_dir / summaries.EVAL_DIR), str(log_dir / "eval"))
    assert (log_dir / "eval" / "events.out.tfevents.3.host").read_bytes() == b"eval"
    (model_dir / "events.out.tfevents.1.host").write_bytes(b"train-1 and more")
    summaries.copy_event_files(str(model_dir), str(log_dir / "train"))  # again later: the copy is refreshed
    assert (log_dir / "train" / "events.out.tfevents.1.host").read_bytes() == b"train-1 and more"


def test_no_event_files_copy_nothing(tmp_path):
    assert summaries.copy_event_files(str(tmp_path), str(tmp_path / "logs")) == []
    assert not (tmp_path / "logs").exists()
