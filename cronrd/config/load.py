"""Finding and reading the config file (bounded, like the job files)."""

from __future__ import annotations

import os

import yaml

from cronrd.bounded_yaml import (MAX_FILE_BYTES, FileTooLarge, YAMLLimitError, read_bounded,
                                 safe_load)
from cronrd.errors import ConfigError

from .model import DEFAULT_CONFIG_PATH, Config
from .parse import parse_config


def config_path(explicit: str | None) -> str:
    return explicit or os.environ.get("CRONRD_CONFIG") or DEFAULT_CONFIG_PATH



def load_config(path: str) -> Config:
    """Read, parse and validate the config file; every failure is a ConfigError.

    Reading is bounded like the job files' (``bounded_yaml``): at most 1 MiB,
    64 levels of nesting, no alias bomb."""
    try:
        with open(path, "rb") as f:
            data = read_bounded(f.fileno(), MAX_FILE_BYTES)
        text = data.decode("utf-8-sig")
        raw = safe_load(text, fast=False) or {}  # a few lines: the pure parser's messages
    except FileNotFoundError:
        raise ConfigError(
            f"config file {path} not found; pass --config FILE, set CRONRD_CONFIG, or "
            f"create {DEFAULT_CONFIG_PATH} (see `man cronrd`)") from None
    except FileTooLarge as exc:
        raise ConfigError(f"{path}: refusing the config file: it is larger than "
                          f"{exc.limit} bytes (1 MiB); a cronrd config is a few lines, "
                          "check that --config names the right file") from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}:{line}: the config file is not valid UTF-8 (byte "
                          f"0x{data[exc.start]:02x}); save it as UTF-8") from None
    except YAMLLimitError as exc:
        mark = exc.problem_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: refusing the config file: {exc.problem}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
    return parse_config(raw, path)
