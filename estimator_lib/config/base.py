"""What every config type shares: `ConfigError`, one JSON round trip, and dotted-key overrides.

Everything under `estimator_lib.config` is free of TensorFlow, so the CLI and the pipeline compiler can build
and check configs without importing it.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Dict, Mapping, Tuple


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and the fix."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def positive_int(owner: str, name: str, value: Any) -> None:
    require(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        f"{owner}.{name}={value!r} must be a positive integer",
    )


def typed_fields(cls: Any, data: Mapping[str, Any]) -> Dict[str, Any]:
    """`data` for dataclass `cls` with whole floats turned back into ints where `cls` declares ints.

    JSON that went through a protobuf Struct (KFP's dict and list parameters, artifact metadata) has only floats:
    a `{"train_steps": 300}` sent in comes back as `{"train_steps": 300.0}`. The dataclass's own type hints say
    which fields are ints (also inside Optional, tuples and nested configs); a float that is not whole is left
    for the config's own check to refuse.
    """
    hints = typing.get_type_hints(cls)
    return {key: _typed_value(hints[key], value) if key in hints else value for key, value in data.items()}


def _typed_value(hint: Any, value: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return typed_fields(hint, value)
    if origin is typing.Union:
        return _typed_value(next(a for a in args if a is not type(None)), value)
    if hint is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if origin in (tuple, list) and isinstance(value, (list, tuple)) and args:
        return [_typed_value(args[0], v) for v in value]
    return value


class JsonConfig:
    """JSON round trip for frozen dataclasses whose fields are plain values or nested configs."""

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, JsonConfig):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = dict(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        if not isinstance(data, Mapping):
            raise ConfigError(f"{cls.__name__} expects a JSON object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        require(not unknown, f"unknown field(s) {unknown} in {cls.__name__}; known fields: {sorted(known)}")
        data = typed_fields(cls, data)  # 8.0 -> 8 where the field is an int: configs read back keep their ints
        kwargs = {}
        for name, value in data.items():
            hint = hints[name]
            if isinstance(hint, type) and issubclass(hint, JsonConfig):
                value = hint.from_dict(value)
            elif typing.get_origin(hint) is tuple or (
                typing.get_origin(hint) is typing.Union
                and any(typing.get_origin(a) is tuple for a in typing.get_args(hint))
            ):
                value = tuple(value) if isinstance(value, list) else value
            kwargs[name] = value
        return cls(**kwargs)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


def set_dotted(data: Dict[str, Any], dotted: str, value: Any, *, create: bool = False) -> None:
    """Sets `data["a"]["b"] = value` for `dotted` "a.b", in place: the one way every `--set`, pipeline
    hyperparameter and stage placement reaches a config dict.

    With create=False (for a complete `to_dict()`) each section and the field must exist already, so a typo
    fails here, naming what is known. With create=True missing sections are made, for a partial dict that
    `from_dict` checks afterwards. A part that exists but is not a section fails either way.
    """
    node = data
    parts = dotted.split(".")
    require(all(parts), f"--set {dotted}: empty part in the key; write it as section.field")
    for part in parts[:-1]:
        if create and part not in node:
            node[part] = {}
        require(
            isinstance(node.get(part), dict),
            f"--set {dotted}: {part!r} is not a config section; sections here: {sorted(node)}",
        )
        node = node[part]
    require(create or parts[-1] in node, f"--set {dotted}: unknown field {parts[-1]!r}; known here: {sorted(node)}")
    node[parts[-1]] = value


def parse_override(text: str) -> Tuple[str, Any]:
    """Parses "KEY=VALUE" where VALUE is JSON when it parses as JSON, else a plain string."""
    key, sep, raw = text.partition("=")
    require(bool(sep) and bool(key), f"--set {text!r} must look like section.field=value")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value
