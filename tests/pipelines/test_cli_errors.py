"""A mistyped command, flag or choice is refused by its own command's parser (its usage line, exit 2) naming
the closest ones; --help is not affected."""

from __future__ import annotations

import argparse

import pytest

from pipelines import cli


@pytest.fixture
def commands(monkeypatch) -> dict[str, argparse.ArgumentParser]:
    monkeypatch.setenv("COLUMNS", "80")
    [action] = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_a_mistyped_flag_names_the_closest_with_the_commands_usage(commands, capsys):
    assert refused(["run-local", "--lable", "target"], capsys) == (
        commands["run-local"].format_usage()
        + "tpu-pipeline run-local: error: unrecognized argument --lable; did you mean --label?\n"
    )
    assert refused(["show", "--ouput=runs/x"], capsys) == (
        commands["show"].format_usage()
        + "tpu-pipeline show: error: unrecognized argument --ouput=runs/x; did you mean --output?\n"
    )
    err = refused(["run-local", "--lable", "y", "--verbsoe", "--zzz"], capsys)
    assert err.splitlines()[-1] == (
        "tpu-pipeline run-local: error: unrecognized argument --lable; did you mean --label? unrecognized argument "
        "--verbsoe; did you mean --verbose? unrecognized argument --zzz"
    )


def test_a_flag_of_another_command_names_the_commands_that_have_it(commands, capsys):
    assert refused(["show", "--verbose"], capsys) == (
        commands["show"].format_usage()
        + "tpu-pipeline show: error: unrecognized argument --verbose; it is a flag of run-local, reproduce, tune\n"
    )
    assert refused(["run-local", "--cron", "0 3 * * *"], capsys).endswith(
        "error: unrecognized argument --cron; it is a flag of schedule\n"
    )


def test_a_mistyped_command_or_choice_names_the_closest(commands, capsys):
    err = refused(["run-locl"], capsys)
    assert err.startswith("usage: tpu-pipeline [-h] [--version] COMMAND ...\ntpu-pipeline: error: argument COMMAND: ")
    assert err.endswith(
        "invalid choice: 'run-locl' (choose from 'run-local', 'show', 'list', 'reproduce', 'diff', "
        "'tune', 'predict', 'preflight', 'release', 'compile', 'submit', 'schedule'); did you mean run-local?\n"
    )
    assert refused(["run-local", "--engine", "beem"], capsys).endswith(
        "tpu-pipeline run-local: error: argument --engine: invalid choice: 'beem' (choose from 'inprocess', 'beam'); "
        "did you mean beam?\n"
    )


def test_an_extra_value_is_named_and_an_ambiguous_flag_is_argparses_error(commands, capsys):
    assert refused(["show", "a", "b"], capsys).endswith("tpu-pipeline show: error: unrecognized argument b\n")
    assert refused(["run-local", "--eval", "x"], capsys) == (
        commands["run-local"].format_usage()
        + "tpu-pipeline run-local: error: ambiguous option: --eval could match --eval-fraction, --eval-data\n"
    )


def test_help_is_printed_as_before_even_after_a_mistyped_flag(commands, capsys):
    for argv, parser in ((["--help"], cli.build_parser()), (["run-local", "--lable", "x", "--help"], None)):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 0
        assert capsys.readouterr().out == (parser or commands["run-local"]).format_help()
