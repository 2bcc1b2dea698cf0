"""Which commands a member may forward to the leader (cronrd.state.forwarded)."""

from __future__ import annotations

import pytest

from cronrd.errors import PermissionDenied, RequestError
from cronrd.jobspec import parse_job_text
from cronrd.state import commands as C
from cronrd.state.forwarded import check_forwarded, revalidate_spec


def _spec(text: str):
    (job,) = parse_job_text(text, "/etc/cronrd.d/x.yaml").jobs
    return job


GOOD = _spec("name: backup\nschedule: '0 3 * * *'\ncommand: [/bin/true]\nuser: nobody\n"
             "env: {A: b}\nrun_on: {tags: [db]}\nretries: {max: 2, delay: 5s}\ntimeout: 1h\n")


def _put(spec, node="b", **kw):
    d = spec.to_dict()
    return C.PutJob(name=kw.get("name", spec.name), spec=kw.get("d", d),
                    digest=kw.get("digest", spec.digest()), source="/etc/cronrd.d/x.yaml",
                    at=1.0, node=node)


def test_a_member_forwards_its_own_job_files_and_reports():
    check_forwarded(_put(GOOD), "b")
    check_forwarded(C.RunStarted(run_id=1, token=1, node="b", pid=5, started_at=1.0,
                                 log_path="x"), "b")
    check_forwarded(C.NodeInfo(node="b", state="up", addr="h:1", tags=(), at=1.0), "b")
    check_forwarded(C.ManualRun(job="backup", node="", at=1.0), "b")
    check_forwarded(C.SetPaused(name="backup", paused=True, at=1.0), "b")
    # an operator's backfill and rerun asked on a follower
    check_forwarded(C.CreateBackfill(job="backup", fire_times=[60], from_time=60,
                                     to_time=60, reprocess="missing", parallel=1,
                                     order="oldest", at=1.0), "b")
    check_forwarded(C.SetBackfillState(backfill=1, state="paused", at=1.0), "b")
    check_forwarded(C.Rerun(job="backup", fire_time=60, at=1.0), "b")
    check_forwarded(C.Fire(job="j", fire_time=5, kind="scheduled", node="b", due_at=1,
                           at=1, boot=True, target="b"), "b")
    # a web login and logout on the sender (apply checks the token's hash)
    check_forwarded(C.StartSession(node="b", name="ops", token_hash="0" * 64,
                                   session_hash="1" * 64, expires_at=2.0, at=1.0), "b")
    check_forwarded(C.EndSession(node="b", session_hash="1" * 64, at=1.0), "b")


@pytest.mark.parametrize("cmd", [
    _put(GOOD, node="a"),
    C.RunStarted(run_id=1, token=1, node="a", pid=5, started_at=1.0, log_path="/etc/shadow"),
    C.RunFinished(run_id=1, token=1, node="a", state="failed", exit_code=1, signal=None,
                  started_at=None, finished_at=2.0, log_path=None),
    C.NodeInfo(node="a", state="draining", addr="h:1", tags=(), at=1.0),
    C.RemoveJob(name="backup", at=1.0, node="a"),
    C.ManualRun(job="backup", node="a", at=1.0),
    # a web login or logout made on another node (issue 32, point 4)
    C.StartSession(node="a", name="ops", token_hash="0" * 64, session_hash="1" * 64,
                   expires_at=2.0, at=1.0),
    C.EndSession(node="a", session_hash="1" * 64, at=1.0),
], ids=lambda c: c.op)
def test_a_member_may_not_speak_for_another_node(cmd):
    with pytest.raises(PermissionDenied, match="speaks only for itself"):
        check_forwarded(cmd, "b")


@pytest.mark.parametrize("cmd", [
    C.Fire(job="j", fire_time=5, kind="scheduled", node="b", due_at=1, at=1),
    C.AssignRun(run_id=1, node="b", at=1.0),
    C.NodeLost(node="a", at=1.0, reason="x"),
    C.RemoveNode(node="a", at=1.0),
    C.Prune(before=1e12, at=1.0),
    C.RecordGap(job="j", first=1, last=2, count=2, reason="x", at=1.0),
    C.BackfillStep(backfill=1, at=1.0),
    C.UpstreamTimeout(run_id=1, at=1.0),
], ids=lambda c: c.op)
def test_leader_only_commands_are_never_accepted_from_a_peer(cmd):
    with pytest.raises(PermissionDenied):
        check_forwarded(cmd, "b")


def test_a_member_may_not_announce_another_joining_state():
    with pytest.raises(PermissionDenied):
        check_forwarded(C.NodeInfo(node="b", state="joining", addr="h:1", tags=(), at=1.0), "b")


@pytest.mark.parametrize("change, match", [
    ({"schedule": "every full moon"}, "validators"),
    ({"env": [["LD_PRELOAD", "/tmp/x.so"], ["CRONRD_RUN_ID", "1"]]}, "reserved"),
    ({"name": "../../etc"}, "validators"),
    ({"working_dir": "relative/dir"}, "validators"),
    ({"command": ""}, "validators"),
    ({"evil": True}, "unknown keys"),
])
def test_forwarded_job_definitions_pass_the_job_file_validators(change, match):
    d = {**GOOD.to_dict(), **change}
    with pytest.raises(RequestError, match=match):
        revalidate_spec(d, "from b")
    with pytest.raises(RequestError):
        check_forwarded(_put(GOOD, d=d), "b")


def test_a_digest_that_does_not_match_is_refused():
    with pytest.raises(RequestError, match="digest"):
        check_forwarded(_put(GOOD, digest="0" * 64), "b")


def test_revalidation_keeps_every_valid_definition_unchanged():
    for text in ("schedule: '@reboot'\ncommand: echo hi\n",
                 "schedule: '*/5 * * * *'\ncommand: [a, b]\nrun_on: all\nconcurrency: allow\n",
                 "schedule: '@hourly'\ncommand: x\nrun_on: [n1, n2]\ntimezone: Europe/Paris\n"
                 "catchup: all\ntimeout: null\nmax_log_bytes: 2KiB\nenabled: false\n",
                 # a umask is octal text in a file: 0027 must not come back as 27 (0o33)
                 "schedule: '@daily'\ncommand: x\nshell: /bin/bash\nnice: -3\numask: '0027'\n"
                 "ioclass: realtime\nioprio: 2\nenv_file: -/etc/default/x\n"
                 "limits: {memory: 512MiB, cpu: 50%, tasks: 10, open_files: 64}\n"):
        spec = _spec(text)
        assert revalidate_spec(spec.to_dict(), "b").to_dict() == spec.to_dict()


def test_audit_records_are_forwarded_only_for_the_senders_own_socket():
    rec = dict(uid=0, user="root", pid=1, command="pause", target="j", allowed=True, at=1.0)
    check_forwarded(C.Audit(node="b", **rec), "b")
    with pytest.raises(PermissionDenied):
        check_forwarded(C.Audit(node="a", **rec), "b")



def test_what_is_committed_is_the_validated_canonical_definition():
    """Review: `retries: 3` passed revalidation (from_dict normalises it) but
    the raw spec was stored, and every failed run of the job then broke apply."""
    d = {**GOOD.to_dict(), "retries": 3}
    spec = GOOD.__class__.from_dict(d)
    cmd = check_forwarded(C.PutJob(name=spec.name, spec=d, digest=spec.digest(),
                                   source="/etc/cronrd.d/x.yaml", at=1.0, node="b"), "b")
    assert cmd.spec == spec.to_dict() and isinstance(cmd.spec["retries"], dict)


@pytest.mark.parametrize("key, value", [("jitter", 1e308), ("timeout", 1e308),
                                        ("kill_grace", 1e308), ("catchup_window", 1e308),
                                        ("max_log_bytes", 10 ** 30),
                                        ("retries", {"max": 10 ** 18}),
                                        ("nice", -21), ("umask", 0o1000),
                                        ("limits", {"cpu": -1}), ("shell", "sh")])
def test_absurd_values_are_refused_like_in_job_files(key, value):
    with pytest.raises(RequestError):
        revalidate_spec({**GOOD.to_dict(), key: value}, "from b")


def _by_text(spec: dict, source: str):
    """The way definitions from peers were checked before: written out as a
    job file with yaml.safe_dump and parsed (the reference for the nodes)."""
    import yaml as _yaml
    from cronrd.jobspec import parse_job_text
    from cronrd.state.forwarded import _file_form
    body = {k: _file_form(k, v) for k, v in spec.items() if v is not None}
    result = parse_job_text(_yaml.safe_dump(body, sort_keys=False, allow_unicode=True), source)
    return None if result.problems or len(result.jobs) != 1 else result.jobs[0]


@pytest.mark.parametrize("over", [
    {}, {"command": ["/bin/echo", "true", "1", "yes"]}, {"command": "true"},
    {"env": [["A", "1"], ["B", "no"], ["C", "x: y"]]}, {"timeout": 2.5}, {"timeout": None},
    {"retries": {"max": 3, "delay": 1.0, "backoff": 2.0, "max_delay": 60.0, "jitter": 0.1}},
    {"run_on": {"mode": "tags", "values": ["ssd"]}}, {"run_on": {"mode": "nodes",
                                                               "values": ["a", "b"]}},
    {"run_on": {"mode": "all", "values": []}}, {"description": "d\u00e9j\u00e0 vu: *x &y"},
    {"timezone": "Europe/Berlin"}, {"enabled": False}, {"max_running": 2},
    {"schedule": "@every 90s"}, {"user": "nobody", "group": "nogroup", "working_dir": "/tmp"},
    # refused
    {"schedule": "61 * * * *"}, {"timeout": "soon"}, {"command": ""}, {"command": 5},
    {"enabled": "yes"}, {"env": [["1A", "x"]]}, {"concurrency": "sometimes"},
    {"name": "bad name"}, {"retries": {"max": -1}}, {"command": "a\0b"},
    {"run_on": {"mode": "nodes", "values": []}}, {"jitter": True},
])
def test_checking_a_definition_as_nodes_agrees_with_writing_it_out(over):
    from cronrd.errors import RequestError
    from cronrd.jobspec import JobSpec
    from cronrd.state.forwarded import revalidate_spec
    spec = {**JobSpec(name="j", schedule="*/5 * * * *", command="true").to_dict(), **over}
    reference = _by_text(spec, "<b>")
    try:
        got = revalidate_spec(spec, "<b>")
    except RequestError:
        got = None
    assert (got is None) == (reference is None), (over, reference)
    if got is not None:
        assert got.to_dict() == reference.to_dict()


def test_forwarded_params_come_back_in_canonical_form():
    spec = _spec("schedule: '@daily'\ncommand: x\nparams:\n  n: 5\n  r: 2\n  r2: {type: float, "
                 "default: 3}\n  d: true\n  s: 'yes'\n  e: {values: ['1', b], default: '1', "
                 "description: pick}\n  q: {required: true}\n  empty:\n")
    again = revalidate_spec(spec.to_dict(), "b")
    assert again.to_dict() == spec.to_dict() and again.canonical() == spec.canonical()
    bad = {**spec.to_dict(), "params": {"n": {"type": "int", "default": "five"}}}
    with pytest.raises(RequestError, match="params.n.default"):
        revalidate_spec(bad, "b")
