"""The daemon config's notifiers and cluster-wide notify: values checked,
every problem naming the config file, the line and the key."""

from __future__ import annotations

import pytest

from cronrd.config import load_config, parse_config
from cronrd.errors import ConfigError
from cronrd.jobspec.notify import DEFAULT_ON, NotifyRoute


def problems_of(tmp_path, text: str) -> list[str]:
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\n" + text)
    with pytest.raises(ConfigError) as err:
        load_config(str(path))
    lines = str(err.value).splitlines()
    assert all(line.startswith(f"{path}:") for line in lines), lines
    return [line[len(str(path)) + 1:] for line in lines]


def test_three_types_and_a_default(tmp_path):
    (tmp_path / "chat.secret").write_text("s3cret\n")
    path = tmp_path / "cronrd.yaml"
    path.write_text(
        "notifiers:\n"
        "  oncall: {type: smtp, to: [ops@example.com], from: cronrd@example.com, port: 2525}\n"
        "  chat: {type: webhook, url: 'https://127.0.0.1:8080/hook', secret_file: chat.secret,\n"
        "         ca_file: /etc/ssl/hooks-ca.pem,\n"
        "         max_attempts: 3, retry_delay: 2s}\n"
        "  page: {type: command, command: /usr/local/bin/page, timeout: 5s}\n"
        "notify: [{to: oncall, on: [failed, recovered]}, chat]\n")
    n = load_config(str(path), ).notifications
    assert sorted(n.notifiers) == ["chat", "oncall", "page"]
    chat = n.notifiers["chat"]
    assert (chat.type, chat.max_attempts, chat.retry_delay) == ("webhook", 3, 2.0)
    assert chat.secret_file == str(tmp_path / "chat.secret")  # relative to the config
    assert chat.ca_file == "/etc/ssl/hooks-ca.pem"
    assert n.notifiers["oncall"].port == 2525 and n.notifiers["oncall"].sender == \
        "cronrd@example.com"
    assert n.notifiers["page"].timeout == 5.0
    assert n.default == (NotifyRoute("oncall", ("failed", "recovered")),
                         NotifyRoute("chat", DEFAULT_ON))


def test_no_notifiers_is_no_notifications():
    n = parse_config({"node_id": "n1"}).notifications
    assert n.notifiers == {} and n.default == ()


def test_every_problem_names_the_file_line_and_key(tmp_path):
    got = problems_of(tmp_path, (
        "notifiers:\n"
        "  chat: {type: webhok}\n"
        "  hook: {type: webhook, url: 'ftp://x', tiemout: 5s}\n"
        "  mail: {type: smtp, to: nobody, from: a@b}\n"
        "notify: [{to: cht}]\n"))
    assert any(g.startswith("3:") and "notifiers.chat.type must be smtp, webhook or command "
               "(got 'webhok')" in g for g in got), got
    assert any(g.startswith("4:") and "unknown key notifiers.hook.tiemout (did you mean "
               "'timeout'?)" in g for g in got), got
    assert any(g.startswith("4:") and "notifiers.hook.url must be an http:// or https:// URL"
               in g for g in got), got
    assert any(g.startswith("5:") and "notifiers.mail.to must be a list of mail addresses"
               in g for g in got), got
    assert any(g.startswith("6:") and "notify[0].to: no notifier named 'cht' in notifiers "
               "(did you mean 'chat'?)" in g for g in got), got
    assert len(got) == 5, got


def test_an_unreadable_secret_file_stops_the_daemon_not_validate(tmp_path):
    raw = {"node_id": "n1", "notifiers": {"chat": {
        "type": "webhook", "url": "http://h/x", "secret_file": str(tmp_path / "missing")}}}
    assert parse_config(raw).notifications.notifiers["chat"].secret_file
    from cronrd.config.notifiers import parse_notifications
    from cronrd.config.problems import ConfigProblems
    report = ConfigProblems("/etc/cronrd/cronrd.yaml")
    parse_notifications(raw, "/etc/cronrd", report, daemon_files=True)
    assert [p.message for p in report.problems] == [
        f"notifiers.chat.secret_file: cannot read {tmp_path / 'missing'} (the daemon reads "
        "the secret from it when it sends); create it, readable by the daemon only "
        "(chmod 600)"]


@pytest.mark.parametrize("spec, message", [
    ({"type": "smtp", "to": ["a@b"]}, "notifiers.x needs from: (type smtp)"),
    ({"type": "smtp", "to": ["a@b"], "from": "c@d", "tls": True, "starttls": True},
     "notifiers.x: tls and starttls exclude each other"),
    ({"type": "command"}, "notifiers.x needs command: (type command)"),
    ({"type": "smtp", "to": ["a@b"], "from": "c@d", "host": "mail.example.com",
      "username": "u", "password_file": "/p"},
     "notifiers.x: a login to mail.example.com needs tls: true or starttls: true"),
    ({"type": "command", "command": "x", "max_attempts": 0},
     "notifiers.x.max_attempts must be a whole number from 1 to 100 (got 0)"),
    ({"type": "webhook", "url": "http://h", "timeout": "1h"},
     "notifiers.x.timeout must be between 0.1s and 300s (got 3600s)"),
])
def test_each_type_checks_its_keys(spec, message):
    with pytest.raises(ConfigError) as err:
        parse_config({"node_id": "n1", "notifiers": {"x": spec}})
    assert message in str(err.value)


def test_on_is_a_word_in_notify_not_yaml_11s_true(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("notifiers:\n  page: {type: command, command: /bin/true}\n"
                    "notify:\n  - to: page\n    on: [failed]\n")
    assert load_config(str(path)).notifications.default == (NotifyRoute("page", ("failed",)),)
