"""``params:``: a job's declared run parameters, read from the job file
(with positions), and the values `run-now --param NAME=VALUE` gives them.

A value travels as text (the environment variable's): each type has one
canonical text (``env_text``), which is what a run stores and gets.
"""

from __future__ import annotations

import math
import re
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import UsageError
from .model import PARAM_TYPES, Param
from .nodes import BOOL, FLOAT, INT, NULL, FileProblems, _got, _is, _is_str, _unknown_key, _value, \
    mapping_items

PARAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MAX_PARAMS = 100
MAX_VALUE = 4096       # characters of one value
ENV_PREFIX = "CRONRD_PARAM_"
_PARAM_KEYS = ("type", "default", "values", "required", "description")
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def env_name(name: str) -> str:
    """``CRONRD_PARAM_<NAME>``, the name upper-cased."""
    return ENV_PREFIX + name.upper()


def env_text(ptype: str, value: Any) -> str:
    """A typed value (a default from the job file) as its canonical text."""
    if value is None:
        return ""
    if ptype == "bool":
        return "true" if value else "false"
    if ptype == "float":
        return repr(float(value))
    return str(value)


def parse_value(param: Param, text: str) -> str:
    """The canonical text of ``text`` given for ``param``; ValueError with
    what is allowed when it is not one of its values."""
    if len(text) > MAX_VALUE:
        raise ValueError(f"at most {MAX_VALUE} characters")
    if "\0" in text:
        raise ValueError("no NUL character")
    kind = param.type
    if kind == "int":
        if not re.fullmatch(r"[+-]?[0-9]+", text.strip()):
            raise ValueError("a whole number such as 42")
        return str(int(text))
    if kind == "float":
        try:
            number = float(text)
        except ValueError:
            raise ValueError("a number such as 0.5") from None
        if not math.isfinite(number):
            raise ValueError("a finite number such as 0.5")
        return repr(number)
    if kind == "bool":
        low = text.strip().lower()
        if low in _TRUE:
            return "true"
        if low in _FALSE:
            return "false"
        raise ValueError("true or false")
    if kind == "enum":
        if text not in param.values:
            raise ValueError("one of " + ", ".join(param.values))
        return text
    return text


def check_run_params(job: str, params: tuple[Param, ...], given: dict[str, str]) -> dict[str, str]:
    """`run-now --param` values checked against the job's ``params:``: the
    canonical text of each, or UsageError naming the parameter and what it
    allows (an unknown name, a wrong type, an enum value, a required one
    missing)."""
    declared = {p.name: p for p in params}
    out: dict[str, str] = {}
    for name in sorted(given):
        param = declared.get(name)
        if param is None:
            known = ", ".join(sorted(declared)) if declared else "none: it has no params:"
            raise UsageError(f"job {job!r} has no parameter {name!r}; its parameters: {known}")
        try:
            out[name] = parse_value(param, given[name])
        except ValueError as exc:
            raise UsageError(f"--param {name}={given[name]!r}: parameter {name!r} of job "
                             f"{job!r} is {_type_words(param)}; give {exc}") from None
    missing = [p.name for p in params if p.required and p.name not in out]
    if missing:
        raise UsageError(f"job {job!r} needs --param {missing[0]}=VALUE (required"
                         + (f"; also {', '.join(missing[1:])}" if missing[1:] else "")
                         + "); `cronrd show " + job + "` lists its parameters")
    return out


def run_env(params: tuple[Param, ...], given: dict[str, str]) -> dict[str, str]:
    """``CRONRD_PARAM_<NAME>`` for each declared parameter: the run's value,
    else the default, else empty."""
    return {env_name(p.name): given[p.name] if p.name in given else env_text(p.type, p.default)
            for p in params}


def _type_words(param: Param) -> str:
    if param.type == "enum":
        return "an enum (" + ", ".join(param.values) + ")"
    return {"string": "a string", "int": "a whole number", "float": "a number",
            "bool": "a boolean"}[param.type]


# -- the job file ---------------------------------------------------------------------
def parse_params(ctx: FileProblems, node: Node) -> tuple[Param, ...] | None:
    """``params:`` of a job file: its parameters sorted by name, or None
    (every problem recorded with its position)."""
    expected = ("a mapping of NAME: default-value or NAME: {type: string|int|float|bool|enum, "
                "default: ..., values: [...], required: true, description: ...}")
    if not isinstance(node, MappingNode) or not node.value:
        ctx.err(node, f"params must be {expected} ({_got(node)})")
        return None
    items = mapping_items(ctx, node)
    if len(items) > MAX_PARAMS:
        ctx.err(node, f"params: at most {MAX_PARAMS} parameters (got {len(items)})")
        return None
    out: list[Param] = []
    bad = False
    upper: dict[str, str] = {}
    for name, (knode, vnode) in items.items():
        if not PARAM_NAME_RE.fullmatch(name):
            ctx.err(knode, f"invalid parameter name {name!r}: use letters, digits and '_', "
                           "not starting with a digit, at most 64 characters (it becomes "
                           f"{ENV_PREFIX}NAME)")
            bad = True
            continue
        if name.upper() in upper:
            ctx.err(knode, f"parameters {upper[name.upper()]!r} and {name!r} are both "
                           f"{env_name(name)} in the environment; rename one")
            bad = True
            continue
        upper[name.upper()] = name
        param = (_long_form(ctx, name, vnode) if isinstance(vnode, MappingNode)
                 else _short_form(ctx, name, vnode))
        if param is None:
            bad = True
        else:
            out.append(param)
    return None if bad else tuple(sorted(out, key=lambda p: p.name))


_TAG_TYPES = {"tag:yaml.org,2002:str": "string", INT: "int", FLOAT: "float", BOOL: "bool"}


def _short_form(ctx: FileProblems, name: str, node: Node) -> Param | None:
    if _is(node, NULL):
        return Param(name)
    if not isinstance(node, ScalarNode) or node.tag not in _TAG_TYPES:
        hint = ("; for an enum write {type: enum, values: [...]}"
                if isinstance(node, SequenceNode) else "; quote it")
        ctx.err(node, f"params.{name} must be a default value (a string, number or true/false) "
                      f"or a mapping with type:, default:, ... ({_got(node)}){hint}")
        return None
    ptype = _TAG_TYPES[node.tag]
    default = _checked_default(ctx, name, ptype, node, ())
    return None if default is _BAD else Param(name, ptype, default)


_BAD = object()


def _checked_default(ctx: FileProblems, name: str, ptype: str, node: Node,
                     values: tuple[str, ...]) -> Any:
    where = f"params.{name}.default"
    if ptype in ("string", "enum"):
        if not (_is_str(node) or (ptype == "enum" and _is(node, INT))):
            ctx.err(node, f"{where} must be a string for a {ptype} parameter ({_got(node)}); "
                          f"quote it")
            return _BAD
        text = str(_value(node))
        if ptype == "enum" and text not in values:
            ctx.err(node, f"{where} must be one of its values: {', '.join(values)} "
                          f"(got {text!r})")
            return _BAD
        if len(text) > MAX_VALUE:
            ctx.err(node, f"{where} is longer than {MAX_VALUE} characters")
            return _BAD
        return text
    if ptype == "int":
        if not _is(node, INT):
            ctx.err(node, f"{where} must be a whole number for an int parameter ({_got(node)})")
            return _BAD
        return _value(node)
    if ptype == "float":
        if not (_is(node, INT) or _is(node, FLOAT)) or not math.isfinite(float(_value(node))):
            ctx.err(node, f"{where} must be a finite number for a float parameter "
                          f"({_got(node)})")
            return _BAD
        return float(_value(node))
    if not _is(node, BOOL):
        ctx.err(node, f"{where} must be true or false for a bool parameter ({_got(node)})")
        return _BAD
    return _value(node)


def _long_form(ctx: FileProblems, name: str, node: MappingNode) -> Param | None:
    items = mapping_items(ctx, node)
    bad = False
    for key, (knode, _v) in items.items():
        if key not in _PARAM_KEYS:
            _unknown_key(ctx, knode, key, _PARAM_KEYS, where=f"in params.{name}")
            bad = True
    ptype = None
    if "type" in items:
        tnode = items["type"][1]
        if not _is_str(tnode) or tnode.value not in PARAM_TYPES:
            ctx.err(tnode, f"params.{name}.type must be one of {', '.join(PARAM_TYPES)} "
                           f"({_got(tnode)})")
            return None
        ptype = tnode.value
    values: tuple[str, ...] = ()
    if "values" in items:
        knode, vnode = items["values"]
        if ptype not in (None, "enum"):
            ctx.err(knode, f"params.{name}.values is for type: enum (this parameter is "
                           f"{ptype}); remove it or write type: enum")
            return None
        ptype = "enum"
        enum_values = _enum_values(ctx, name, vnode)
        if enum_values is None:
            return None
        values = enum_values
    elif ptype == "enum":
        ctx.err(items["type"][1], f"params.{name}: an enum needs values: [A, B, ...]")
        return None
    dnode = items["default"][1] if "default" in items else None
    if ptype is None:   # from the default's YAML type
        ptype = (_TAG_TYPES.get(dnode.tag, "string")
                 if isinstance(dnode, ScalarNode) and not _is(dnode, NULL) else "string")
    default = None
    if dnode is not None and not _is(dnode, NULL):
        default = _checked_default(ctx, name, ptype, dnode, values)
        if default is _BAD:
            return None
    required = False
    if "required" in items:
        rnode = items["required"][1]
        if not _is(rnode, BOOL):
            ctx.err(rnode, f"params.{name}.required must be true or false ({_got(rnode)})")
            return None
        required = _value(rnode)
        if required and default is not None:
            ctx.err(rnode, f"params.{name} is required and has a default: a required "
                           "parameter must be given to `cronrd run-now`; remove one of them")
            return None
    description = ""
    if "description" in items:
        desc = items["description"][1]
        if not _is_str(desc):
            ctx.err(desc, f"params.{name}.description must be a string ({_got(desc)})")
            return None
        description = desc.value.strip()
    return None if bad else Param(name, ptype, default, values, required, description)


def _enum_values(ctx: FileProblems, name: str, node: Node) -> tuple[str, ...] | None:
    if not isinstance(node, SequenceNode) or not node.value:
        ctx.err(node, f"params.{name}.values must be a non-empty list of strings "
                      f"({_got(node)})")
        return None
    out: list[str] = []
    for item in node.value:
        if not (_is_str(item) or _is(item, INT)) or not str(item.value):
            ctx.err(item, f"each of params.{name}.values must be a non-empty string "
                          f"({_got(item)})")
            return None
        text = str(_value(item))
        if text in out:
            ctx.err(item, f"params.{name}.values lists {text!r} twice")
            return None
        out.append(text)
    return tuple(out)
