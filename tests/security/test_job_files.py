"""Hostile job files: alias bombs, deep nesting, huge or undecodable files.

Whoever can write one file in jobs_dir (or the config) must not be able to
stop the watcher, the daemon's start or its shutdown. Each case here hung or
crashed before the reading was bounded (cronrd/bounded_yaml.py).
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from cronrd import bounded_yaml, jobspec
from cronrd.config import load_config
from cronrd.errors import ConfigError
from cronrd.jobspec import load_job_file, load_jobs_dir, parse_job_text
from harness import wait_for


def _levels(n: int, fan: int, prefix: str = "x-") -> str:
    """n levels of anchors, each a list of ``fan`` aliases of the level below."""
    lines = [f"{prefix}l0: &l0 [{', '.join(['lol'] * fan)}]"]
    for i in range(1, n):
        lines.append(f"{prefix}l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]")
    return "\n".join(lines) + "\n"


# Nine levels of ten: 10**9 values once expanded, 300 bytes on disk.
BOMB = "schedule: '@daily'\n" + _levels(9, 10) + "command: *l8\n"
DEEP = "schedule: '@daily'\ncommand: x\nenv: " + "[" * 100_000 + "]" * 100_000 + "\n"
DEEP_BLOCK = "schedule: '@daily'\ncommand: x\nenv:\n" + "".join(
    "  " * i + "-\n" for i in range(1, 500))
RECURSIVE = "schedule: '@daily'\ncommand: &c [echo, *c]\n"


def finishes(fn, timeout: float = 10.0):
    """fn() in a daemon thread: its result, or AssertionError if it runs past timeout
    (the old loader never returned on an alias bomb)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
    t = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout}s"
    if "error" in box:
        raise box["error"]
    box["seconds"] = time.monotonic() - start
    return box["value"]


def only_problem(result) -> jobspec.Problem:
    assert not result.jobs
    assert len(result.problems) == 1, result.problems
    return result.problems[0]


# -- the loader's bounds --------------------------------------------------------------------
def test_alias_bomb_is_refused_before_it_is_expanded():
    res = finishes(lambda: parse_job_text(BOMB, "/etc/cronrd.d/bomb.yaml"), timeout=5)
    p = only_problem(res)
    assert p.path == "/etc/cronrd.d/bomb.yaml"
    # where the expansion crossed the bound: the first level past a million values
    assert (p.line, p.col) == (7, 7), p
    assert "refusing job file" in p.message and "alias" in p.message
    assert "write the values out or split the file" in p.message


def test_alias_bomb_in_merge_keys_is_refused():
    text = _levels(7, 10) + "jobs:\n  - name: a\n    schedule: '@daily'\n" \
        "    command: x\n    env: {<<: [*l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6, *l6]}\n"
    p = only_problem(finishes(lambda: parse_job_text(text, "merge.yaml"), timeout=5))
    assert "expands to more than 1000000 values" in p.message


def test_too_many_aliases_are_refused_even_when_small():
    text = "schedule: '@daily'\nx-a: &a x\ncommand: [" + ", ".join(["*a"] * 1001) + "]\n"
    p = only_problem(parse_job_text(text, "many.yaml"))
    assert "more than 1000 aliases" in p.message and p.line == 3


def test_100000_deep_flow_nesting_is_a_problem_of_the_file():
    p = only_problem(finishes(lambda: parse_job_text(DEEP, "deep.yaml"), timeout=10))
    assert "nested more than 64 levels deep" in p.message and p.line == 3


def test_deep_block_nesting_is_a_problem_of_the_file():
    p = only_problem(finishes(lambda: parse_job_text(DEEP_BLOCK, "deep.yaml"), timeout=10))
    assert "nested more than 64 levels deep" in p.message
    assert p.line == 3 + 64  # the root mapping is level 1, the list on line 4 level 2


def test_a_recursive_alias_is_refused():
    p = only_problem(finishes(lambda: parse_job_text(RECURSIVE, "rec.yaml"), timeout=5))
    assert "alias *c refers to the node that contains it" in p.message
    assert (p.line, p.col) == (2, 20)


def test_ordinary_anchors_and_nesting_still_load():
    text = ("x-defaults: &d {timeout: 1h, retries: {max: 2, delay: 5s}}\n"
            "x-env: &e {A: '1', B: '2'}\njobs:\n"
            + "".join(f"  - name: j{i}\n    schedule: '@daily'\n    command: [echo, '{i}']\n"
                      f"    env: *e\n    <<: *d\n" for i in range(300)))
    res = parse_job_text(text, "many.yaml")
    assert res.ok, res.problems[:3]
    assert len(res.jobs) == 300 and res.jobs[0].timeout == 3600.0
    assert res.jobs[299].env == (("A", "1"), ("B", "2"))


def test_nesting_and_expansion_just_inside_the_bounds_load():
    # 63 levels below the job mapping, and an alias tree of just under 10**6 values
    assert bounded_yaml.compose("a: " + "[" * 63 + "]" * 63) is not None
    with pytest.raises(bounded_yaml.YAMLLimitError):
        bounded_yaml.compose("a: " + "[" * 64 + "]" * 64)
    def tree(n):  # root 1 + a (1 + 1 + 999) + b (1 + 1 + n * 1000) values
        return "a: &a [" + ", ".join(["x"] * 999) + "]\nb: [" + ", ".join(["*a"] * n) + "]\n"
    assert bounded_yaml.compose(tree(998)) is not None      # 999,004 values
    with pytest.raises(bounded_yaml.YAMLLimitError, match="more than 1000000 values"):
        bounded_yaml.compose(tree(999))                      # 1,000,004 values


def test_a_job_file_over_1_mib_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("schedule: '@daily'\ncommand: x\n# " + "x" * (1 << 20) + "\n")
    p = only_problem(load_job_file(str(path)))
    assert (p.path, p.line) == (str(path), 0)
    assert f"larger than {1 << 20} bytes" in p.message and "split" in p.message
    # exactly at the cap is fine
    path.write_text("schedule: '@daily'\ncommand: x\n#".ljust(1 << 20, "x"))
    assert load_job_file(str(path)).ok


def test_bad_files_in_a_directory_are_each_reported_and_the_good_job_loads(tmp_path):
    (tmp_path / "good.yaml").write_text("schedule: '@daily'\ncommand: echo ok\n")
    (tmp_path / "bomb.yaml").write_text(BOMB)
    (tmp_path / "deep.yaml").write_text(DEEP)
    (tmp_path / "rec.yaml").write_text(RECURSIVE)
    (tmp_path / "latin1.yaml").write_bytes(b"schedule: '@daily'\ncommand: echo \xe9\n")
    (tmp_path / "big.yaml").write_text("#" * ((1 << 20) + 1))
    res = finishes(lambda: load_jobs_dir(str(tmp_path)), timeout=15)
    assert set(res.jobs) == {"good"}
    by_file = {os.path.basename(p.path): p for p in res.problems}
    assert set(by_file) == {"bomb.yaml", "deep.yaml", "rec.yaml", "latin1.yaml", "big.yaml"}
    assert "alias" in by_file["bomb.yaml"].message
    assert "64 levels" in by_file["deep.yaml"].message
    assert "recursive" in by_file["rec.yaml"].message
    assert "not valid UTF-8" in by_file["latin1.yaml"].message
    assert by_file["latin1.yaml"].line == 2
    assert "larger than" in by_file["big.yaml"].message


@pytest.mark.parametrize("exc", [RecursionError("maximum recursion depth exceeded"),
                                 MemoryError(), OSError(5, "Input/output error")])
def test_any_exception_while_loading_one_file_is_a_problem_of_that_file(tmp_path, monkeypatch,
                                                                        exc):
    (tmp_path / "a_good.yaml").write_text("schedule: '@daily'\ncommand: echo ok\n")
    (tmp_path / "b_evil.yaml").write_text("schedule: '@daily'\ncommand: echo evil\n")
    real = jobspec.files._parse_text

    def parse(text, path, pools=None):
        if path.endswith("b_evil.yaml"):
            raise exc
        return real(text, path, pools)
    monkeypatch.setattr(jobspec.files, "_parse_text", parse)
    res = load_jobs_dir(str(tmp_path))
    assert set(res.jobs) == {"a_good"}
    p = only_problem(next(f for f in res.files if f.path.endswith("b_evil.yaml")))
    assert p.message.startswith(f"cannot load job file ({type(exc).__name__}")
    assert "keep their last good version" in p.message
    single = load_job_file(str(tmp_path / "b_evil.yaml"))
    assert only_problem(single).message == p.message


def test_too_many_problems_in_one_file_are_summed_up():
    text = "schedule: '@daily'\ncommand: [" + ", ".join(["1"] * 500) + "]\n"
    res = parse_job_text(text, "noisy.yaml")
    assert len(res.problems) == jobspec.MAX_PROBLEMS_PER_FILE + 1
    assert res.problems[-1].message.startswith("... and 400 more problems")


# -- the watcher's backstop ------------------------------------------------------------------
def test_the_watcher_survives_a_loader_that_raises(monkeypatch, tmp_path):
    import asyncio

    import apsw

    from cronrd.runtime.jobfiles import watcher as W
    from cronrd.runtime.log.local import LocalLog
    from cronrd.state import queries as Q
    from cronrd.state.machine import StateMachine

    class Clock:
        def now(self):
            return 1000.0

    (tmp_path / "old.yaml").write_text("schedule: '@daily'\ncommand: 'true'\n")
    sm = StateMachine(apsw.Connection(":memory:"))
    w = W.Watcher(str(tmp_path), LocalLog(sm), sm.conn, Clock(), node="n1")
    asyncio.run(w.reload())
    assert Q.job_names(sm.conn) == ["old"]

    def explode(*a, **kw):
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(W, "scan_job_file", explode)
    monkeypatch.setattr(W, "scan_for_sync", explode)
    (tmp_path / "old.yaml").write_text("schedule: '@hourly'\ncommand: 'true'\n")
    res = asyncio.run(w.reload())
    assert res["kept"] == ["old"] and Q.job_names(sm.conn) == ["old"]  # nothing removed
    assert Q.job_spec(sm.conn, "old").schedule == "@daily"  # its last good version
    assert len(res["problems"]) == 1
    assert res["problems"][0].startswith(f"{tmp_path}/old.yaml: cannot load the job file "
                                         "(RecursionError")


# -- the config file -------------------------------------------------------------------------
@pytest.mark.parametrize("text, expect", [
    (_levels(9, 10, prefix="") + "node_id: n1\n", "alias"),
    ("node_id: n1\ncluster: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than 64"),
    ("node_id: n1\ncluster:\n" + "".join("  " * i + "-\n" for i in range(1, 500)),
     "nested more than 64"),
])
def test_config_file_bombs_are_config_errors(tmp_path, text, expect):
    path = tmp_path / "cronrd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        finishes(lambda: load_config(str(path)), timeout=10)
    msg = str(err.value)
    assert msg.startswith(f"{path}:") and expect in msg, msg
    assert "refusing the config file" in msg


def test_config_file_over_1_mib_or_not_utf8_is_a_config_error(tmp_path):
    path = tmp_path / "cronrd.yaml"
    path.write_text("node_id: n1\n#" + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="larger than 1048576 bytes"):
        load_config(str(path))
    path.write_bytes(b"node_id: n1\ntimezone: \xff\n")
    with pytest.raises(ConfigError, match=r"cronrd.yaml:2: the config file is not valid UTF-8"):
        load_config(str(path))


# -- a real daemon -----------------------------------------------------------------------------
def _firing(node, stamp, more: int = 2):
    n = len(stamp.read_text().split()) if stamp.exists() else 0
    wait_for(lambda: stamp.exists() and len(stamp.read_text().split()) >= n + more, 20,
             what="the good job still firing", on_fail=node.daemon_log)


@pytest.mark.integration
def test_alias_bomb_does_not_stop_the_watcher_reload_or_sigterm(node):
    stamp = node.out / "good"
    node.write_job("good", {"schedule": "* * * * * *", "command": f"echo x >> {stamp}"})
    node.start()
    _firing(node, stamp)
    bomb = node.write_job("bomb", BOMB)
    st = wait_for(lambda: (s := node.call("status"))["problems"] and s, 20,
                  what="the bomb reported", on_fail=node.daemon_log)
    assert any(p.startswith(f"{bomb}:7:7: refusing job file") for p in st["problems"]), st
    # reload answers within its deadline and names the file
    t0 = time.monotonic()
    res = node.cli("reload", timeout=20)
    assert time.monotonic() - t0 < 10
    assert res.returncode == 1 and f"{bomb}:7:7:" in res.stderr, res
    assert [j["name"] for j in node.call("jobs")] == ["good"]
    listing = node.cli("jobs")
    assert listing.returncode == 0 and "good" in listing.stdout
    _firing(node, stamp)
    val = node.cli("validate", timeout=20)
    assert val.returncode == 1 and f"{bomb}:7:7:" in val.stdout and "alias" in val.stdout
    assert node.terminate(timeout=20) == 0


@pytest.mark.integration
def test_hostile_files_at_start_up_are_reported_and_the_daemon_starts(node):
    stamp = node.out / "good"
    node.write_job("good", {"schedule": "* * * * * *", "command": f"echo x >> {stamp}"})
    node.write_job("deep", DEEP)
    node.write_job("rec", RECURSIVE)
    node.write_job("bomb", BOMB)
    big = node.jobs_dir / "big.yaml"
    big.write_text("#" * ((1 << 20) + 10))
    node.start()  # ready within the harness's deadline
    st = node.call("status")
    files = {p.split(":", 1)[0] for p in st["problems"]}
    assert files == {str(node.jobs_dir / f"{n}.yaml") for n in ("deep", "rec", "bomb", "big")}
    assert any(p.startswith(f"{node.jobs_dir}/deep.yaml:3:") and "64 levels" in p
               for p in st["problems"])
    human = node.cli("status")
    assert "deep.yaml:3:" in human.stdout
    assert [j["name"] for j in node.call("jobs")] == ["good"]
    _firing(node, stamp)
    val = node.cli("validate", timeout=20)
    assert val.returncode == 1 and "deep.yaml:3:" in val.stdout
    assert node.terminate(timeout=20) == 0
