"""The daemon's log lines are logfmt: every value, whatever it holds (quotes,
spaces, ``=``, newlines, nothing), reads back as it was written."""

from __future__ import annotations

import io
import logging

import pytest

from cronrd.runtime.logfmt import JournalFormatter, LogfmtFormatter, quote, render

_UNESCAPE = {'"': '"', "\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def parse(line: str) -> dict[str, str | None]:
    """A small logfmt reader: key=value, key="quoted \\" value", bare key.
    Strict: raises on anything a logfmt writer could not have produced."""
    out: dict[str, str | None] = {}
    i, n = 0, len(line)
    while i < n:
        if line[i] == " ":
            i += 1
            continue
        j = i
        while j < n and line[j] not in ' ="':
            j += 1
        key = line[i:j]
        assert key, f"empty key at {i} in {line!r}"
        if j == n or line[j] == " ":
            out[key] = None
            i = j
            continue
        assert line[j] == "=", f"bad character {line[j]!r} at {j} in {line!r}"
        j += 1
        if j < n and line[j] == '"':
            j += 1
            value = []
            while True:
                assert j < n, f"unterminated value in {line!r}"
                c = line[j]
                if c == '"':
                    j += 1
                    break
                if c == "\\":
                    e = line[j + 1]
                    if e == "u":
                        value.append(chr(int(line[j + 2:j + 6], 16)))
                        j += 6
                    else:
                        value.append(_UNESCAPE[e])
                        j += 2
                    continue
                assert c >= " ", f"raw control character in {line!r}"
                value.append(c)
                j += 1
            assert j == n or line[j] == " ", f"text right after a quoted value in {line!r}"
            out[key] = "".join(value)
        else:
            k = line.find(" ", j)
            k = n if k < 0 else k
            value = line[j:k]
            assert '"' not in value and "=" not in value, f"unquoted {value!r} in {line!r}"
            out[key] = value
            j = k
        i = j
    return out


NASTY = ['say "hi"', "a=b", "two\nlines", "", "back\\slash", "tab\there", " lead",
         'x" y="z', "bell\x07", "plain", "ünïcode ok"]


@pytest.mark.parametrize("value", NASTY)
def test_a_value_reads_back_as_it_was(value):
    for template in ('event=x error="%s" n=%d', "event=x error=%s n=%d"):
        line = render(template, (value, 3))
        assert "\n" not in line
        assert parse(line) == {"event": "x", "error": value, "n": "3"}, line


def test_values_are_quoted_only_when_they_must_be():
    assert quote("plain") == "plain"
    assert quote("") == '""'
    assert quote('a "b"') == '"a \\"b\\""'
    assert quote("a=b") == '"a=b"'
    assert quote("l1\nl2") == '"l1\\nl2"'
    # The quotes a template writes around a value follow the same rule.
    assert render('event=run_lost job=%s reason="%s"', ("b", "gone")) == (
        "event=run_lost job=b reason=gone")
    assert render('event=run_lost job=%s reason="%s"', ("b", 'exit "1"')) == (
        'event=run_lost job=b reason="exit \\"1\\""')


def test_literal_text_and_several_placeholders_in_one_value():
    line = render('event=copied file=%s from=%s:%s hint="tried again in %gs; see `cronrd '
                  'status`" pct=50%%', ("/etc/cronrd.d/a b.yaml", "n1", 7000, 1.5))
    assert parse(line) == {"event": "copied", "file": "/etc/cronrd.d/a b.yaml",
                           "from": "n1:7000", "hint": "tried again in 1.5s; see `cronrd "
                           "status`", "pct": "50%"}


def test_repr_values_nest_no_unescaped_quotes():
    exc = ValueError('bad "thing"\nhere')
    line = render("event=task_failed task=%s error=%r", ("t", exc))
    assert parse(line) == {"event": "task_failed", "task": "t", "error": repr(exc)}


def test_free_text_becomes_msg():
    line = render("node %s: refused connection from %s: %s", ("a", "10.0.0.9", 'no "cert"'))
    assert parse(line) == {"msg": 'node a: refused connection from 10.0.0.9: no "cert"'}
    assert render("event=%s happened %s", ("x", "a b")) == 'event=x happened "a b"'


def test_a_template_that_does_not_fit_its_arguments_raises():
    with pytest.raises(TypeError):
        render("event=x a=%s b=%s", ("only one",))
    with pytest.raises(TypeError):
        render("event=x a=%s", ("one", "two"))


def _logged(formatter: logging.Formatter, msg, *args, exc=False) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("cronrd.test_logfmt")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception(msg, *args)
    else:
        logger.warning(msg, *args)
    return stream.getvalue()


def test_the_daemon_formatters_write_logfmt_lines():
    text = _logged(LogfmtFormatter("%(levelname)s %(name)s %(message)s"),
                   'event=fatal error="%s"', 'cfg.yaml:2:1: unknown key "x"\ncfg.yaml:3:1: y=z')
    assert text.endswith("\n") and text.count("\n") == 1
    level, name, rest = text.rstrip("\n").split(" ", 2)
    assert (level, name) == ("WARNING", "cronrd.test_logfmt")
    assert parse(rest) == {"event": "fatal",
                           "error": 'cfg.yaml:2:1: unknown key "x"\ncfg.yaml:3:1: y=z'}
    text = _logged(JournalFormatter("%(name)s %(message)s"), "event=x a=%s", "b c")
    assert text == '<4>cronrd.test_logfmt event=x a="b c"\n'


def test_odd_records_are_still_one_logfmt_line():
    # No arguments: the message is left as written (as logging does), %s and all.
    assert _logged(LogfmtFormatter("%(message)s"), "event=x what=%s").strip() == (
        "event=x what=%s")
    # Not a template: the whole message as msg.
    assert _logged(LogfmtFormatter("%(message)s"), {"a": 1}) == "msg=\"{'a': 1}\"\n"
    assert _logged(LogfmtFormatter("%(message)s"), "free %s text", "x") == (
        'msg="free x text"\n')
    # A call whose template does not fit its arguments is still one line.
    assert _logged(LogfmtFormatter("%(message)s"), "event=x a=%d", "notanumber") == (
        "msg=\"event=x a=%d\" args=('notanumber',)\n")


def test_a_traceback_follows_the_line():
    text = _logged(LogfmtFormatter("%(message)s"), "event=failed job=%s", "a b", exc=True)
    first, *rest = text.splitlines()
    assert parse(first) == {"event": "failed", "job": "a b"}
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "RuntimeError: boom"


def test_the_daemon_logs_through_the_logfmt_formatter(capsys, monkeypatch):
    from cronrd.runtime.daemon import setup_logging
    root = logging.getLogger("cronrd")
    saved = (root.handlers[:], root.level, root.propagate)
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    try:
        setup_logging("info")
        logging.getLogger("cronrd.daemon").error('event=fatal error="%s"',
                                                 'bad "value"\nsecond line')
    finally:
        root.handlers[:], root.level, root.propagate = saved
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    rest = lines[0].split(" ERROR cronrd.daemon ", 1)[1]
    assert parse(rest) == {"event": "fatal", "error": 'bad "value"\nsecond line'}
