"""`runs.find_summary`: the one way `show`, `diff` and `reproduce` take a run (a run id under --output, a run
folder, a summary.json, an output directory's latest run), and the error naming each path it looked at."""

from __future__ import annotations

import os

import pytest
from test_reproduce import write_run

from pipelines import cli, reproduce, runs


def test_a_run_is_found_by_its_id_folder_or_summary_or_as_an_output_directorys_latest(tmp_path):
    output = str(tmp_path / "out")
    path = write_run(output, "20261122T100000Z-aaaaaa")
    folder = os.path.dirname(path)
    assert runs.find_summary(output, "20261122T100000Z-aaaaaa") == path
    assert runs.find_summary(None, folder) == runs.find_summary(output, path) == path
    os.symlink(os.path.join("runs", "20261122T100000Z-aaaaaa"), os.path.join(output, runs.LATEST_LINK))
    assert runs.find_summary(output, None) == path


def test_a_run_not_found_names_each_path_looked_at_and_the_runs_there(tmp_path):
    output = str(tmp_path / "out")
    write_run(output, "20261122T100000Z-aaaaaa")
    with pytest.raises(runs.RunNotFoundError) as e:
        runs.find_summary(output, "20261122T1")
    assert str(e.value) == (
        f"no run '20261122T1': looked for 20261122T1/summary.json (a run folder or an output directory) and "
        f"{output}/runs/20261122T1/summary.json (a run id under --output {output}); runs there: "
        "20261122T100000Z-aaaaaa"
    )
    with pytest.raises(runs.RunNotFoundError, match=r"^no run '/x/s.json': looked for /x/s.json \(a summary.json\)$"):
        runs.find_summary(None, "/x/s.json")


def test_diff_takes_two_run_folders_or_two_run_ids_under_output(tmp_path, capsys):
    output = str(tmp_path / "out")
    a, b = (os.path.dirname(write_run(output, f"run-{name}")) for name in "ab")
    assert cli.main(["diff", a, b]) == 0
    by_folder = capsys.readouterr().out
    assert by_folder.startswith("run-a and run-b are equivalent: same data")
    assert cli.main(["diff", "run-a", "run-b", "--output", output]) == 0
    assert capsys.readouterr().out == by_folder


def test_diff_of_an_unknown_run_names_what_it_looked_for(tmp_path, capsys):
    output = str(tmp_path / "out")
    a = write_run(output, "run-a")
    assert cli.main(["diff", a, "run-c", "--output", output]) == 2
    assert capsys.readouterr().err == (
        f"tpu-pipeline diff: error: no run 'run-c': looked for run-c/summary.json (a run folder or an output "
        f"directory) and {output}/runs/run-c/summary.json (a run id under --output {output}); runs there: run-a; "
        "no summary.json and no stage manifest (stage_manifest.json) under run-c: give a run's summary.json, its "
        "folder (OUTPUT/runs/<id>), an output directory, or a Vertex AI run's directory under its pipeline root\n"
    )
    with pytest.raises(reproduce.RecordError, match=r"^no run '\S+': looked for \S+ \(a run folder or an output"):
        reproduce.read_record(str(tmp_path / "none"))  # reproduce looks for no run id: its --output is the rerun's
