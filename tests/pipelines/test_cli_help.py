"""The CLI's help is checked, not trusted: every flag of every command has help, no help names a flag its
command lacks, and the submit and schedule help open with the flags most runs need."""

from __future__ import annotations

import argparse
import re

import pytest

from pipelines import cli

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# How long `submit --help` and `schedule --help` may run.
# at 80 columns: 186 and 201 before; +2 for failure alerts, +3 for the tuning job (--tune-space, --tune-trials,
# --tune-parallel), +2 for --input-fn
MAX_HELP_LINES = {"submit": 119, "schedule": 129}  # --no-preflight, --allow-no-fit: a line each


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [commands] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(commands.choices)


def help_of(parser: argparse.ArgumentParser, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("COLUMNS", "80")
    return parser.format_help()


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_every_flag_has_help(name):
    missing = [
        a.option_strings[0] if a.option_strings else a.dest
        for a in subcommands()[name]._actions
        if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
    ]
    assert missing == [], f"{name}: no help for {missing}"


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_help_names_only_flags_the_command_has(name, monkeypatch):
    parser = subcommands()[name]
    flags = {s for a in parser._actions for s in a.option_strings}
    mentioned = set(FLAG.findall(help_of(parser, monkeypatch)))
    assert sorted(mentioned - flags) == [], f"`{name} --help` mentions flags `{name}` lacks"


def test_the_top_level_help_names_only_flags_that_exist(monkeypatch):
    """Its own flags, and those its one-line summaries of the commands name (release --repair)."""
    mentioned = set(FLAG.findall(help_of(cli.build_parser(), monkeypatch)))
    assert mentioned == {"--help", "--version", "--repair"}
    assert "--repair" in subcommands()["release"].format_help()


@pytest.mark.parametrize("name", sorted(MAX_HELP_LINES))
def test_submit_and_schedule_help_is_short_and_opens_with_the_common_flags(name, monkeypatch):
    text = help_of(subcommands()[name], monkeypatch)
    assert len(text.splitlines()) <= MAX_HELP_LINES[name]
    groups = re.findall(r"^(\S[^\n]*):\n", text, flags=re.M)
    assert groups[:2] == ["options", "common"]
    common = text.split("\ncommon:\n")[1].split("\n\n")[0]
    assert FLAG.findall(common)[:8] == [
        "--project",
        "--region",
        "--pipeline-root",
        "--data",
        "--label",
        "--tpu",
        "--cpu",
        "--image",
    ]


def test_task_and_display_name_say_what_they_do(monkeypatch):
    text = help_of(subcommands()["submit"], monkeypatch)
    assert re.search(r"--task \{[^}]+\}\s+classification or regression", text)
    assert re.search(r"--display-name NAME\s+the job's name in the Vertex AI console", text)


def test_version_names_the_package_tensorflow_and_kfp(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"tpu-pipeline \d+\.\d+\.\d+\S* \(TensorFlow 2\.15\.\d+, kfp 2\.13\.\d+\)\n", out), out
