"""Parsing a JSON object into a request dataclass, and its JSON Schema.

Fields are typed with plain annotations (``str``, ``int``, ``float``,
``bool``, ``X | None``, ``list[str]``, ``dict[str, str]``, ``Any``) and may
carry constraints through ``Annotated``: ``Doc`` (the schema's
description), ``Range`` (bounds of a number), ``MaxLen`` (of a string),
``Names`` (one or several names from a set, as a list or "a,b"), ``Time``
(epoch seconds or ISO 8601, parsed to epoch seconds).

The checks and messages are those the control socket always gave
(``missing argument 'x'``, ``argument 'x' must be an integer``...), so a
request moved onto a type answers a bad argument as it did before. Keys the
type does not name are ignored: a newer client may send an argument an
older daemon does not know yet (a rolling upgrade), as the socket always
allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Mapping, TypeVar, Union

from ..errors import CronrdError, UsageError
from ..schedule import parse_iso

T = TypeVar("T")
INT_LIMIT = 1 << 62  # the largest magnitude an integer argument may have


@dataclass(frozen=True)
class Doc:
    """What the field means (the schema's description)."""
    text: str


@dataclass(frozen=True)
class Range:
    """Inclusive bounds of a number; ``message`` replaces the default error
    (it may name ``{lo}`` and ``{hi}``)."""
    lo: float | None = None
    hi: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class MaxLen:
    """The most characters a string may have; ``message`` replaces the
    default error (it may name ``{n}``)."""
    n: int
    message: str | None = None


@dataclass(frozen=True)
class Names:
    """One or several names out of ``allowed``: a list, or one string of
    names separated by commas ("failed,lost")."""
    allowed: tuple[str, ...]


@dataclass(frozen=True)
class Wire:
    """The argument's name on the wire where it cannot be the field's (a
    Python keyword: ``from_`` is sent as ``from``)."""
    name: str


@dataclass(frozen=True)
class Time:
    """A time: epoch seconds, or ISO 8601 text; parsed to epoch seconds."""


# The ``consistent`` argument of a read.
Consistent = Annotated[bool, Doc("wait until this node has applied every write the cluster "
                                 "committed before the request (a read through the leader)")]


@dataclass(frozen=True)
class _Spec:
    name: str                     # the argument's name on the wire (messages use it)
    field: str                    # the dataclass field's
    kind: Any                     # the annotation without None and Annotated
    optional: bool
    required: bool
    default: Any
    marks: tuple[Any, ...]


_SPECS: dict[type, tuple[_Spec, ...]] = {}


def _specs(cls: type) -> tuple[_Spec, ...]:
    cached = _SPECS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        hint = hints[f.name]
        marks: tuple[Any, ...] = ()
        if typing.get_origin(hint) is typing.Annotated:
            hint, *extra = typing.get_args(hint)
            marks = tuple(extra)
        optional = False
        if typing.get_origin(hint) in (Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) < len(typing.get_args(hint))
            hint = args[0] if len(args) == 1 else Union[tuple(args)]
        has_default = (f.default is not dataclasses.MISSING
                       or f.default_factory is not dataclasses.MISSING)
        default = (f.default if f.default is not dataclasses.MISSING else
                   f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        wire = next((m.name for m in marks if isinstance(m, Wire)), f.name)
        out.append(_Spec(wire, f.name, hint, optional, not has_default, default, marks))
    specs = tuple(out)
    _SPECS[cls] = specs
    return specs


def _mark(spec: _Spec, kind: type[T]) -> T | None:
    return next((m for m in spec.marks if isinstance(m, kind)), None)


def _check(spec: _Spec, value: Any) -> Any:
    name, kind = spec.name, spec.kind
    names = _mark(spec, Names)
    if names is not None:
        return _names(name, value, names.allowed)
    if _mark(spec, Time) is not None:
        return _time(name, value)
    if kind is Any:
        return value
    if kind is bool:
        if not isinstance(value, bool):
            raise UsageError(f"argument {name!r} has the wrong type")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"argument {name!r} must be an integer")
        if not -INT_LIMIT < value < INT_LIMIT:
            raise UsageError(f"argument {name!r} is out of range")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UsageError(f"argument {name!r} must be a number")
        if not math.isfinite(value):
            raise UsageError(f"argument {name!r} must be a finite number")
        value = float(value)
    elif kind is str:
        if not isinstance(value, str):
            raise UsageError(f"argument {name!r} has the wrong type")
        limit = _mark(spec, MaxLen)
        if limit is not None and len(value) > limit.n:
            raise UsageError((limit.message or "argument {name!r} is longer than {n} characters"
                              ).format(name=name, n=limit.n))
    elif typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind)
        if not isinstance(value, list) or not all(isinstance(v, item) for v in value):
            raise UsageError(f"argument {name!r} has the wrong type")
        value = list(value)
    elif typing.get_origin(kind) is dict:
        key, item = typing.get_args(kind)
        if not isinstance(value, dict) or not all(
                isinstance(k, key) and isinstance(v, item) for k, v in value.items()):
            raise UsageError(f"argument {name!r} has the wrong type")
        value = dict(value)
    else:  # pragma: no cover - a request type with a field this module does not know
        raise TypeError(f"{name}: no parser for {kind!r}")
    bounds = _mark(spec, Range)
    if bounds is not None and ((bounds.lo is not None and value < bounds.lo)
                               or (bounds.hi is not None and value > bounds.hi)):
        lo, hi = _number(bounds.lo), _number(bounds.hi)
        raise UsageError((bounds.message or "{name} must be {lo} to {hi}").format(
            name=name, lo=lo, hi=hi))
    return value


def _number(x: float | None) -> str:
    return "" if x is None else str(int(x)) if float(x).is_integer() else str(x)


def _names(name: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise UsageError(f"argument {name!r} must be a name or a list of names")
    for v in value:
        if v not in allowed:
            raise UsageError(f"unknown {name} {v!r}; use one of {', '.join(allowed)}")
    return list(value)


def _time(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise UsageError(f"argument {name!r} must be a time")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise UsageError(f"argument {name!r} must be a time")
        return float(value)
    if isinstance(value, str):
        try:
            return float(parse_iso(value))
        except CronrdError as exc:
            raise UsageError(f"{name}: {exc}") from None
    raise UsageError(f"argument {name!r} must be a time (ISO 8601 or epoch seconds)")


def parse(cls: type[T], args: Mapping[str, Any]) -> T:
    """``args`` (a JSON object from a client) as a ``cls``; UsageError
    naming the first argument that is missing or wrong. A key given as null
    counts as left out."""
    if not isinstance(args, Mapping):
        raise UsageError("the request's arguments must be a JSON object")
    values: dict[str, Any] = {}
    for spec in _specs(cls):
        value = args.get(spec.name)
        if value is None:
            if spec.required:
                raise UsageError(f"missing argument {spec.name!r}")
            continue
        values[spec.field] = _check(spec, value)
    return cls(**values)


def as_args(request: Any) -> dict[str, Any]:
    """A request as the JSON object ``parse`` reads back (fields left at
    None are left out)."""
    return {s.name: getattr(request, s.field) for s in _specs(type(request))
            if getattr(request, s.field) is not None}


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _field_schema(spec: _Spec) -> dict[str, Any]:
    out: dict[str, Any]
    names = _mark(spec, Names)
    if names is not None:
        item = {"type": "string", "enum": list(names.allowed)}
        out = {"oneOf": [{"type": "array", "items": item, "minItems": 1},
                         {"type": "string", "description": "names separated by commas"}]}
    elif _mark(spec, Time) is not None:
        out = {"oneOf": [{"type": "number", "description": "Unix seconds"},
                         {"type": "string", "description": "ISO 8601 / RFC 3339"}]}
    elif spec.kind in _JSON_TYPES:
        out = {"type": _JSON_TYPES[spec.kind]}
    elif typing.get_origin(spec.kind) is list:
        (item_kind,) = typing.get_args(spec.kind)
        out = {"type": "array", "items": {"type": _JSON_TYPES.get(item_kind, "string")}}
    elif typing.get_origin(spec.kind) is dict:
        _, item_kind = typing.get_args(spec.kind)
        out = {"type": "object",
               "additionalProperties": {"type": _JSON_TYPES.get(item_kind, "string")}}
    else:
        out = {}
    bounds = _mark(spec, Range)
    if bounds is not None:
        if bounds.lo is not None:
            out["minimum"] = bounds.lo
        if bounds.hi is not None:
            out["maximum"] = bounds.hi
    limit = _mark(spec, MaxLen)
    if limit is not None:
        out["maxLength"] = limit.n
    doc = _mark(spec, Doc)
    if doc is not None:
        out["description"] = doc.text
    if not spec.required and spec.default is not None:
        out["default"] = spec.default
    return out


def schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of ``cls``'s arguments (an object)."""
    specs = _specs(cls)
    out: dict[str, Any] = {"type": "object",
                           "properties": {s.name: _field_schema(s) for s in specs}}
    required = [s.name for s in specs if s.required]
    if required:
        out["required"] = required
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    return out


def fields(cls: type) -> list[tuple[str, dict[str, Any], bool]]:
    """(name, schema, required) of each argument of ``cls``: the OpenAPI
    document lists a GET route's as query parameters."""
    return [(s.name, _field_schema(s), s.required) for s in _specs(cls)]
