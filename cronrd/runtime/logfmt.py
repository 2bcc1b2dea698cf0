"""The daemon's log lines as logfmt: ``event=run_lost job=backup reason="exit code 1"``.

The log calls are written as printf templates of ``key=value`` pairs
(``log.warning("event=run_lost job=%s reason=\\"%s\\"", job, why)``). Pasting a
value into the template as it is breaks the line when the value holds a
space, a quote, ``=`` or a newline (an exception's text often does). The
:class:`LogfmtFormatter` fills each value in separately and writes it the
logfmt way: bare when it is a plain word, else in double quotes with ``"``
and ``\\`` escaped by a backslash and control characters as ``\\n``, ``\\t``,
``\\r`` or ``\\u00XX``. The quotes a template puts around a value
(``reason="%s"``) are replaced by that rule, so ``reason=gone`` and
``reason="exit code 1"``. A message that does not start with ``key=`` (free
text) becomes ``msg="..."``. A traceback (``log.exception``) follows the
line as Python prints it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Iterator

__all__ = ["LogfmtFormatter", "JournalFormatter", "quote", "render", "setup_logging"]

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*=")
_SPEC = re.compile(r"%(?:\([^)]*\))?[#0 +\-]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?"
                   r"[diouxXeEfFgGcrsa%]")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def quote(value: str) -> str:
    """``value`` as a logfmt value: as it is when it is a plain non-empty word,
    else quoted, with ``"`` ``\\`` and control characters escaped."""
    if value and not any(c in ' ="\\' or c < " " or c == "\x7f" for c in value):
        return value
    out = []
    for c in value:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif c < " " or c == "\x7f":
            out.append(f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


class _Args:
    """The arguments of a log call, taken in order by the placeholders."""

    def __init__(self, args: tuple):
        self._it: Iterator = iter(args)
        self._literal = not args  # logging leaves a message without arguments as it is

    def fill(self, template: str) -> tuple[str, bool]:
        """``template`` with its placeholders filled; and whether it had any."""
        found = False
        if self._literal:
            return template, False

        def one(m: re.Match) -> str:
            nonlocal found
            spec = m.group()
            if spec == "%%":
                return "%"
            if "*" in spec or "(" in spec:
                raise ValueError("unsupported placeholder")
            found = True
            value = next(self._it, _END)
            if value is _END:
                raise TypeError("not enough arguments for the template")
            return spec % (value,)

        return _SPEC.sub(one, template), found

    def done(self) -> bool:
        return next(self._it, _END) is _END


_END = object()


def _closing_quote(text: str, start: int) -> int:
    """The index of the ``"`` that closes a value opened before ``start``:
    the first one followed by a space or the end (the end if there is none)."""
    i = start
    while True:
        i = text.find('"', i)
        if i < 0:
            return len(text)
        if i + 1 == len(text) or text[i + 1] == " ":
            return i
        i += 1


def render(template: str, args: tuple) -> str:
    """The logfmt line of a log call's template and arguments (see the module).

    Raises ValueError or TypeError when they do not fit each other (then the
    caller falls back to ``%`` formatting)."""
    if not _KEY.match(template):
        return "msg=" + quote(template % args if args else template)
    vals = _Args(args)
    out: list[str] = []
    i, n = 0, len(template)
    while i < n:
        if template[i] == " ":
            out.append(" ")
            i += 1
            continue
        key = _KEY.match(template, i)
        if key is not None:
            j = key.end()
            if j < n and template[j] == '"':
                end = _closing_quote(template, j + 1)
                value, _ = vals.fill(template[j + 1:end])
                i = end + 1
            else:
                end = template.find(" ", j)
                end = n if end < 0 else end
                value, _ = vals.fill(template[j:end])
                i = end
            out.append(key.group() + quote(value))
            continue
        end = template.find(" ", i)
        end = n if end < 0 else end
        word, filled = vals.fill(template[i:end])
        out.append(quote(word) if filled else word)
        i = end
    if not vals.done():
        raise TypeError("not all arguments converted")
    return "".join(out)


class LogfmtFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose ``%(message)s`` is the logfmt line of the
    record (see the module); other fields as ``logging.Formatter``'s."""

    def format(self, record: logging.LogRecord) -> str:
        msg, args = record.msg, record.args
        try:
            if not isinstance(msg, str) or not isinstance(args, tuple):
                raise TypeError("not a template with positional arguments")
            line = render(msg, args)
        except (ValueError, TypeError, KeyError):
            try:
                line = "msg=" + quote(record.getMessage())
            except (ValueError, TypeError, KeyError):  # the call itself is wrong
                line = f"msg={quote(str(msg))} args={quote(repr(args))}"
        copy = logging.makeLogRecord(record.__dict__)
        copy.msg, copy.args = line, None
        return super().format(copy)


class JournalFormatter(LogfmtFormatter):
    """``<prio>message`` for journald (it adds its own timestamps)."""

    PRIO = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
            logging.CRITICAL: 2}

    def format(self, record):
        return f"<{self.PRIO.get(record.levelno, 6)}>{super().format(record)}"


def setup_logging(level: str) -> None:
    """The daemon's logger (and its faces' process's): logfmt lines on
    stderr, in the journal's form under systemd."""
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(JournalFormatter("%(name)s %(message)s"))
    else:
        handler.setFormatter(LogfmtFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("cronrd")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
