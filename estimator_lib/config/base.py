"""What every config type shares: `ConfigError`, one JSON round trip, and dotted-key overrides.

Everything under `estimator_lib.config` is free of TensorFlow, so the CLI and the pipeline compiler can build
and check configs without importing it.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
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
    def from_dict(cls, data: Mapping[str, Any], path: str = ""):
        """The config `data` describes (a `to_dict()`, or a part of one: missing fields take their defaults).

        Every value is checked against its field's declared type first (`check_value`): an int field takes an
        int, not 8.0; a tuple a list. Errors name the field's dotted key, `path` + name ("prepare." for a
        prepare section).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path.rstrip('.') or cls.__name__} must be a JSON object, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(set(data) - set(known))
        require(
            not unknown,
            f"unknown field(s) {unknown} in {cls.__name__}; known fields: {sorted(known)}"
            + _did_you_mean(unknown[0], known)
            if unknown
            else "",
        )
        kwargs = {}
        for name, value in data.items():
            hint = hints[name]
            if isinstance(hint, type) and issubclass(hint, JsonConfig):
                value = value if isinstance(value, hint) else hint.from_dict(value, f"{path}{name}.")
            else:
                value = check_value(hint, value, f"{path}{name}")
            kwargs[name] = value
        return cls(**kwargs)

    def to_json(self, indent: int | None = 2) -> str:
        """The config as JSON text, keys sorted; indent=None gives one line (a pipeline parameter)."""
        separators = (",", ":") if indent is None else None
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True, separators=separators)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))


def _did_you_mean(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def set_dotted(data: Dict[str, Any], dotted: str, value: Any, *, create: bool = False) -> None:
    """Sets `data["a"]["b"] = value` for `dotted` "a.b", in place: the one way every `--set` and stage placement
    reaches a config dict.

    With create=False (for a complete `to_dict()`) each section and the field must exist already, so a typo
    fails here, naming what is known (and the closest known name). With create=True missing sections are made,
    for a partial dict that `from_dict` checks afterwards. A part that exists but is not a section fails either
    way.
    """
    node = data
    parts = dotted.split(".")
    require(all(parts), f"--set {dotted}: empty part in the key; write it as section.field")
    for part in parts[:-1]:
        if create and part not in node:
            node[part] = {}
        require(
            isinstance(node.get(part), dict),
            f"--set {dotted}: {part!r} is not a config section; sections here: {sorted(node)}"
            + _did_you_mean(part, [k for k, v in node.items() if isinstance(v, dict)]),
        )
        node = node[part]
    require(
        create or parts[-1] in node,
        f"--set {dotted}: unknown field {parts[-1]!r}; known here: {sorted(node)}" + _did_you_mean(parts[-1], node),
    )
    node[parts[-1]] = value


def split_override(text: str) -> Tuple[str, str]:
    """ "KEY=VALUE" -> ("KEY", "VALUE"), both as given (VALUE is parsed by the field's type: `parse_typed`)."""
    key, sep, raw = text.partition("=")
    require(bool(sep) and bool(key.strip()), f"--set {text!r} must look like section.field=value")
    return key.strip(), raw


def parse_override(text: str) -> Tuple[str, Any]:
    """Parses "KEY=VALUE" where VALUE is JSON when it parses as JSON, else a plain string (for a key whose type
    is not known; `parse_typed` parses by the field's declared type)."""
    key, raw = split_override(text)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


# -- types -----------------------------------------------------------------------------------------------------
NULL = "null"
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def field_hint(cls: Any, dotted: str, key: str = "") -> Any:
    """The declared type of field `dotted` of config type `cls`: (JobConfig, "model.hidden_units") ->
    Tuple[int, ...]. Raises `ConfigError` naming `key` (the key as given; default `dotted`), the known fields
    and the closest for an unknown one."""
    key = key or dotted
    hint: Any = cls
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not (isinstance(hint, type) and dataclasses.is_dataclass(hint)):
            raise ConfigError(f"--set {key}: {'.'.join(parts[:i])!r} is a field, not a config section")
        hints = typing.get_type_hints(hint)
        names = [f.name for f in dataclasses.fields(hint)]
        require(
            part in names,
            f"--set {key}: unknown field {part!r}; known here: {sorted(names)}" + _did_you_mean(part, names),
        )
        hint = hints[part]
    return hint


def dotted_fields(cls: Any, prefix: str = "") -> list[str]:
    """Every leaf field of config type `cls` as a dotted key: JobConfig -> ["model.code", ..., "training.seed"]."""
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            keys += dotted_fields(hint, f"{prefix}{f.name}.")
        else:
            keys.append(prefix + f.name)
    return keys


def describe_type(hint: Any) -> str:
    """What a value of type `hint` is, in words: Optional[int] -> "an integer or null"."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        inner = next(a for a in args if a is not type(None))
        return f"{describe_type(inner)} or null"
    if origin is tuple:
        return f"a list of {_plural(args[0])} (e.g. 64,32)"
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer"
    if hint is float:
        return "a number"
    if hint is str:
        return "a text"
    if _is_mapping(hint):
        return "a JSON object"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"a JSON object ({hint.__name__})"
    return str(hint)


def _is_mapping(hint: Any) -> bool:
    return hint in (Mapping, dict) or typing.get_origin(hint) in (collections.abc.Mapping, dict)


def _plural(hint: Any) -> str:
    return {int: "integers", float: "numbers", str: "texts"}.get(hint, describe_type(hint))


def parse_typed(hint: Any, raw: str, key: str) -> Any:
    """The `--set KEY=RAW` text as a value of the field's declared type `hint`.

    ints, floats and bools from their text ("300", "0.4", "true"/"false"); tuples from "64,32", "64" or a JSON
    list; null for an Optional field; a JSON object for a mapping or a nested config; a text as it is. Raises
    `ConfigError` naming the key, the value and the type it must have.
    """
    try:
        return _parse(hint, raw.strip() if hint is not str else raw)
    except (ValueError, TypeError):
        raise ConfigError(f"--set {key}={raw}: {raw!r} is not {describe_type(hint)}") from None


def _parse(hint: Any, raw: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        return None if raw.strip() == NULL else _parse(next(a for a in args if a is not type(None)), raw)
    if hint is bool:
        lowered = raw.lower()
        if lowered not in _TRUE + _FALSE:
            raise ValueError(raw)
        return lowered in _TRUE
    if hint is int:
        return int(raw)
    if hint is float:
        return float(raw)
    if hint is str:
        return raw
    if origin is tuple:
        if raw.startswith("["):
            items = json.loads(raw)
            return tuple(check_value(args[0], v, "item") for v in items)
        return tuple(_parse(args[0], part.strip()) for part in raw.split(",")) if raw else ()
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError(raw)
    return value


def check_value(hint: Any, value: Any, key: str) -> Any:
    """`value` (from JSON) checked against the declared type `hint`: an int where an int is declared (a bool or
    a float is refused, also a whole one), a number where a float is (an int is taken as its float), a list of
    the right items for a tuple. Returns the value (a list as a tuple, an int as a float); raises `ConfigError`
    naming `key`, the value and the type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    wrong = ConfigError(f"{key}={value!r} must be {describe_type(hint)}")
    if origin is typing.Union:
        if value is None:
            return None
        try:
            return check_value(next(a for a in args if a is not type(None)), value, key)
        except ConfigError:
            raise wrong from None
    if hint is bool:
        if not isinstance(value, bool):
            raise wrong
    elif hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise wrong
    elif hint is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise wrong
        return float(value)
    elif hint is str:
        if not isinstance(value, str):
            raise wrong
    elif origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise wrong
        try:
            return tuple(check_value(args[0], v, key) for v in value)
        except ConfigError:
            raise wrong from None
    elif _is_mapping(hint):
        if not isinstance(value, Mapping):
            raise wrong
    return value
