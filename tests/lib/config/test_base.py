"""`estimator_lib.config.base`: `--set` texts parsed by the field's type, JSON values checked against it, dotted
keys with did-you-mean, and the JSON round trip; exact values and messages."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Tuple

import pytest

from estimator_lib.config import ConfigError, JobConfig, JsonConfig
from estimator_lib.config.base import (
    check_value,
    describe_type,
    field_hint,
    parse_override,
    parse_typed,
    positive_int,
    require,
    set_dotted,
    split_override,
)


@dataclasses.dataclass(frozen=True)
class Inner(JsonConfig):
    steps: int = 1
    rate: float = 0.5


@dataclasses.dataclass(frozen=True)
class Outer(JsonConfig):
    name: str = "a"
    units: Tuple[int, ...] = (4,)
    limit: Optional[int] = None
    flag: bool = False
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    inner: Inner = dataclasses.field(default_factory=Inner)


@pytest.mark.parametrize(
    "hint, raw, value",
    [
        (int, "300", 300),
        (int, " 7 ", 7),
        (float, "0.4", 0.4),
        (float, "1", 1.0),
        (bool, "true", True),
        (bool, "False", False),
        (bool, "0", False),
        (bool, "yes", True),
        (str, " spaced ", " spaced "),
        (Tuple[int, ...], "64,32", (64, 32)),
        (Tuple[int, ...], "64", (64,)),
        (Tuple[int, ...], "[64, 32]", (64, 32)),
        (Tuple[int, ...], "", ()),
        (Tuple[str, ...], "a, b", ("a", "b")),
        (Optional[int], "null", None),
        (Optional[int], "5", 5),
        (Optional[str], "null", None),
        (Optional[str], "gs://b/x", "gs://b/x"),
        (Mapping[str, Any], '{"accuracy": 0.9}', {"accuracy": 0.9}),
    ],
)
def test_parse_typed_reads_the_text_as_the_declared_type(hint, raw, value):
    parsed = parse_typed(hint, raw, "s.k")
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    "hint, raw, message",
    [
        (int, "3.5", "--set s.k=3.5: '3.5' is not an integer"),
        (int, "x", "--set s.k=x: 'x' is not an integer"),
        (float, "fast", "--set s.k=fast: 'fast' is not a number"),
        (bool, "maybe", "--set s.k=maybe: 'maybe' is not true or false"),
        (Tuple[int, ...], "64,x", "--set s.k=64,x: '64,x' is not a list of integers (e.g. 64,32)"),
        (Tuple[int, ...], "[64, 1.5]", "--set s.k=[64, 1.5]: '[64, 1.5]' is not a list of integers (e.g. 64,32)"),
        (Optional[int], "none", "--set s.k=none: 'none' is not an integer or null"),
        (Mapping[str, Any], "[1]", "--set s.k=[1]: '[1]' is not a JSON object"),
    ],
)
def test_parse_typed_refuses_naming_the_key_the_value_and_the_type(hint, raw, message):
    with pytest.raises(ConfigError) as e:
        parse_typed(hint, raw, "s.k")
    assert str(e.value) == message


def test_check_value_takes_exact_types_only():
    assert check_value(int, 3, "k") == 3
    assert check_value(float, 3, "k") == 3.0 and type(check_value(float, 3, "k")) is float
    assert check_value(Tuple[int, ...], [1, 2], "k") == (1, 2)
    assert check_value(Optional[int], None, "k") is None
    for hint, value, message in (
        (int, 8.0, "k=8.0 must be an integer"),
        (int, True, "k=True must be an integer"),
        (float, "0.1", "k='0.1' must be a number"),
        (bool, 1, "k=1 must be true or false"),
        (str, 5, "k=5 must be a text"),
        (Tuple[int, ...], 64, "k=64 must be a list of integers (e.g. 64,32)"),
        (Optional[int], 2.5, "k=2.5 must be an integer or null"),
        (Mapping[str, Any], [], "k=[] must be a JSON object"),
    ):
        with pytest.raises(ConfigError) as e:
            check_value(hint, value, "k")
        assert str(e.value) == message


def test_describe_type():
    assert describe_type(Optional[Tuple[str, ...]]) == "a list of texts (e.g. 64,32) or null"
    assert describe_type(Inner) == "a JSON object (Inner)"


def test_from_dict_checks_types_and_names_the_dotted_key():
    assert Outer.from_dict({"units": [8, 4], "inner": {"rate": 1}}) == Outer(units=(8, 4), inner=Inner(rate=1.0))
    with pytest.raises(ConfigError) as e:
        Outer.from_dict({"inner": {"steps": 8.0}}, "section.")
    assert str(e.value) == "section.inner.steps=8.0 must be an integer"
    with pytest.raises(ConfigError) as e:
        Outer.from_dict({"inner": 3}, "section.")
    assert str(e.value) == "section.inner must be a JSON object, got int"
    with pytest.raises(ConfigError) as e:
        Outer.from_dict({"unit": [1]})
    assert str(e.value) == (
        "unknown field(s) ['unit'] in Outer; known fields: ['extra', 'flag', 'inner', 'limit', 'name', 'units']; "
        "did you mean 'units'?"
    )


def test_json_round_trip_and_one_line_json():
    outer = Outer(name="b", units=(2, 1), limit=3, flag=True, extra={"x": [1]}, inner=Inner(steps=2))
    assert Outer.from_json(outer.to_json()) == outer
    assert outer.to_json(indent=None) == (
        '{"extra":{"x":[1]},"flag":true,"inner":{"rate":0.5,"steps":2},"limit":3,"name":"b","units":[2,1]}'
    )


def test_field_hint_walks_nested_configs_and_suggests_the_closest_name():
    assert field_hint(JobConfig, "training.optimizer.learning_rate") is float
    assert field_hint(JobConfig, "model.hidden_units") == Tuple[int, ...]
    with pytest.raises(ConfigError) as e:
        field_hint(Outer, "inner.step", "x.inner.step")
    assert (
        str(e.value) == "--set x.inner.step: unknown field 'step'; known here: ['rate', 'steps']; did you mean 'steps'?"
    )
    with pytest.raises(ConfigError) as e:
        field_hint(Outer, "name.x")
    assert str(e.value) == "--set name.x: 'name' is a field, not a config section"


def test_set_dotted_suggests_the_closest_name():
    data = {"training": {"train_steps": 1}}
    with pytest.raises(ConfigError) as e:
        set_dotted(data, "training.train_step", 3)
    assert str(e.value) == (
        "--set training.train_step: unknown field 'train_step'; known here: ['train_steps']; "
        "did you mean 'train_steps'?"
    )
    with pytest.raises(ConfigError) as e:
        set_dotted(data, "trainig.train_steps", 3)
    assert str(e.value) == (
        "--set trainig.train_steps: 'trainig' is not a config section; sections here: ['training']; did you mean "
        "'training'?"
    )


def test_overrides_split_and_parse():
    assert split_override("model.hidden_units=64,32") == ("model.hidden_units", "64,32")
    assert split_override(" a.b =x=y") == ("a.b", "x=y")
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2]) and parse_override("a.b=text") == ("a.b", "text")
    with pytest.raises(ConfigError) as e:
        split_override("model.hidden_units")
    assert str(e.value) == "--set 'model.hidden_units' must look like section.field=value"


def test_require_and_positive_int():
    require(True, "unused")
    with pytest.raises(ConfigError, match="^the fix$"):
        require(False, "the fix")
    positive_int("tpu", "num_cores", 8)
    for value in (0, -1, 2.0, True):
        with pytest.raises(ConfigError) as e:
            positive_int("tpu", "num_cores", value)
        assert str(e.value) == f"tpu.num_cores={value!r} must be a positive integer"
