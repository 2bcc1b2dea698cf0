"""Tests mirror the modules (DESIGN.md, "Style to follow").

* The unit test of ``cronrd/x/y.py`` is ``tests/unit/x/test_y.py``; a second
  file on one topic of it is ``tests/unit/x/test_y_<topic>.py``. A test of a
  package as a whole is named after the package, inside it:
  ``tests/unit/schedule/test_schedule.py`` tests ``cronrd/schedule/``.
* Tests that start real daemons, clusters, Raft processes or the built binary
  and package live in ``tests/integration/``; attacks in ``tests/security/``;
  helpers (imported as top-level modules) in ``tests/support/``.

So every unit test file's path names a module or package that exists (a
renamed module cannot leave its test behind under the old name), and every
module without a unit test file of its own is in ``NO_UNIT_TEST_FILE`` with
where it is tested instead: adding a module without a test is a choice made
in review, and a module that gets a test file must leave the list.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "cronrd"
UNIT = ROOT / "tests" / "unit"

# Test files about the package as a whole, not about one module.
WHOLE_PACKAGE = {"test_layers.py", "test_mirror.py"}

# Test groups directly under tests/ (and the helpers' directory).
GROUPS = {"unit", "integration", "security", "support"}

# Modules (paths under cronrd/) with no unit test file named after them, and
# what tests them instead. Reviewed: keep it honest.
NO_UNIT_TEST_FILE = {
    "__main__.py": "one line, `python -m cronrd` runs cli.main; integration/ runs it",
    "bounded_yaml.py": "security/test_job_files.py (alias bombs, nesting, sizes)",
    "client.py": "through the CLI and the daemons in integration/ (support/harness.py)",
    # cli/: tested as a package (unit/cli/test_cli*.py, a file per topic).
    "cli/alerts.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/backfills.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/base.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/checkpoints.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/diff.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/cluster.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/jobs.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/local.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/runs.py": "unit/cli/test_cli*.py (the package as a whole)",
    "cli/tokens.py": "unit/cli/test_cli*.py (the package as a whole)",
    "errors.py": "the exception tree; used by every test",
    "offline.py": "integration/test_daily_cli.py (status, jobs, show, runs, logs with the daemon down)",
    # explain/: tested through explain() (unit/explain/test_explain.py), a step each.
    "explain/explain.py": "unit/explain/test_explain.py (named after the package: explain() is its entry)",
    "explain/capacity_steps.py": "unit/explain/test_explain.py (every step, through explain())",
    "explain/record_steps.py": "unit/explain/test_explain.py (every step, through explain())",
    "explain/schedule_steps.py": "unit/explain/test_explain.py (every step, through explain())",
    "explain/subject.py": "unit/explain/test_explain.py (every step, through explain())",
    "explain/verdict.py": "unit/explain/test_explain.py (every step, through explain())",
    "explain/workflow_steps.py": "unit/explain/test_explain.py (every step, through explain())",
    "ids.py": "unit/test_layers.py::test_one_node_id_rule, unit/config/test_config.py",
    # config/: tested as a package (unit/config/test_config.py) and load.py on its own.
    "config/addresses.py": "unit/config/test_config.py (the package as a whole)",
    "config/cluster.py": "unit/config/test_config.py (the package as a whole)",
    "config/directories.py": "security/test_log_paths.py (directories others can write)",
    "config/model.py": "unit/config/test_config.py (the package as a whole)",
    "config/parse.py": "unit/config/test_config.py, unit/config/test_load.py",
    "config/problems.py": "unit/config/test_load.py (FILE:LINE:COL problems)",
    # jobspec/: tested as a package.
    "jobspec/files.py": "unit/jobspec/test_jobspec.py (the package as a whole)",
    "jobspec/model.py": "unit/jobspec/test_jobspec.py (the package as a whole)",
    "jobspec/nodes.py": "unit/jobspec/test_jobspec.py (the package as a whole)",
    "jobspec/parse.py": "unit/jobspec/test_jobspec.py (the package as a whole)",
    # schedule/: tested as a package.
    "schedule/delays.py": "unit/schedule/test_schedule.py (the package as a whole)",
    "schedule/durations.py": "unit/schedule/test_schedule.py (the package as a whole)",
    "schedule/timestamps.py": "unit/schedule/test_schedule.py (the package as a whole)",
    "schedule/zones.py": "unit/schedule/test_schedule.py (the package as a whole)",
    # raft/
    "raft/log.py": "unit/raft/test_core.py (the Raft core's in-memory log)",
    "raft/types.py": "frozen dataclasses; unit/raft/test_codec.py round-trips them",
    # state/: apply and the life cycle have files; the machine is tested as a package.
    "state/commands.py": "unit/state/test_state.py, unit/state/test_state_cluster.py",
    "state/forwarded.py": "security/test_forwarded.py",
    "state/effects.py": "a frozen dataclass; unit/state/test_state.py checks the effects "
                        "apply returns",
    "state/machine.py": "unit/state/test_state.py, unit/state/test_state_cluster.py",
    "state/apply_access.py": "unit/state/test_state.py, test_state_cluster.py (the machine, of which it is a part)",
    "state/apply_common.py": "unit/state/test_state.py, test_state_cluster.py (the machine, of which it is a part)",
    "state/apply_jobs.py": "unit/state/test_state.py, test_state_cluster.py (the machine, of which it is a part)",
    "state/apply_nodes.py": "unit/state/test_state.py, test_state_cluster.py (the machine, of which it is a part)",
    "state/apply_runs.py": "unit/state/test_state.py, test_state_cluster.py (the machine, of which it is a part)",
    "state/apply_workflows.py": "unit/state/test_state.py, test_state_cluster.py (the machine, of which it is a part)",
    "state/schema.py": "unit/state/test_state_cluster.py (schema version)",
    # runtime/
    "runtime/control/server.py": "security/test_control_server.py, integration/test_daemon.py",
    "runtime/daemon.py": "integration/test_daemon.py, integration/test_run_survival.py",
    "runtime/http/api.py": "unit/runtime/test_http_server.py (its routes: tokens, roles, "
                           "pages, cursors, errors, the OpenAPI document)",
    "runtime/control/handlers.py": "integration/test_daemon.py (every control command, through the socket)",
    "runtime/control/jobs.py": "integration/test_daemon.py (every control command, through the socket); a part of Handlers",
    "runtime/control/runs.py": "integration/test_daemon.py (every control command, through the socket); a part of Handlers",
    "runtime/control/workflows.py": "integration/test_daemon.py (every control command, through the socket); a part of Handlers",
    "runtime/control/membership.py": "integration/test_daemon.py (every control command, through the socket); a part of Handlers",
    "runtime/control/logs.py": "security/test_log_paths.py, integration/test_daemon.py (logs), integration/test_daily_cli.py (offline)",
    "runtime/log/local.py": "unit/runtime/log/test_base_contract.py (both Log implementations)",
    "runtime/runs/active.py": "a dataclass of a run's handles; unit/runtime/runs/test_reports.py, "
                              "test_starting.py build them",
    "runtime/runs/executor.py": "integration/test_daemon.py, security/test_log_paths.py",
    "runtime/runs/legacy.py": "integration/test_run_survival.py (runs of an older daemon)",
    "runtime/runs/restart.py": "integration/test_run_survival.py (detach, adopt, collect, lose), "
                               "integration/test_daemon.py (shutdown modes)",
    "runtime/runs/processes.py": "security/test_process_identity.py, integration/",
    "runtime/runs/spawner.py": "unit/runtime/runs/test_supervisor.py (driven through Spawner)",
    "jobspec/notify_field.py": "unit/jobspec/test_notify.py (the notify key of job files)",
    "runtime/control/notifications.py": "integration/test_notifications.py (notifications, notify test)",
}


def _modules() -> set[str]:
    return {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def _tested(test: Path) -> str | None:
    """The module or package (path under cronrd/, packages ending in /) that a
    unit test file is named after, or None when its name names nothing."""
    rel = test.relative_to(UNIT)
    pkg = PKG.joinpath(*rel.parts[:-1])
    if not pkg.is_dir():
        return None
    prefix = "".join(f"{d}/" for d in rel.parts[:-1])
    names = {p.stem: f"{prefix}{p.name}" for p in pkg.glob("*.py") if p.name != "__init__.py"}
    if rel.parts[:-1]:
        names[rel.parts[-2]] = prefix  # the package as a whole
    stem = test.stem.removeprefix("test_")
    hits = [n for n in names if stem == n or stem.startswith(n + "_")]
    return names[max(hits, key=len)] if hits else None


def _unit_tests() -> list[Path]:
    return sorted(p for p in UNIT.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_every_unit_test_file_names_an_existing_module_or_package():
    orphans = [str(p.relative_to(ROOT)) for p in _unit_tests()
               if p.name not in WHOLE_PACKAGE and _tested(p) is None]
    assert not orphans, (
        "unit test files whose names name no module or package under cronrd/ (rename them "
        "after the module they test: tests/unit/x/test_y.py for cronrd/x/y.py):\n"
        + "\n".join(orphans))


def test_every_unit_test_directory_mirrors_a_package():
    bad = [str(d.relative_to(ROOT)) for d in UNIT.rglob("*")
           if d.is_dir() and d.name != "__pycache__" and "__pycache__" not in d.parts
           and not (PKG / d.relative_to(UNIT)).is_dir()]
    assert not bad, f"directories under tests/unit/ with no package under cronrd/: {bad}"


def test_tests_live_in_their_groups():
    tests = ROOT / "tests"
    loose = sorted(p.name for p in tests.glob("test_*.py"))
    assert not loose, (f"test files directly in tests/: {loose}; put each in tests/unit/ "
                       "(mirroring cronrd/), tests/integration/ or tests/security/")
    dirs = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert dirs <= GROUPS, f"unknown test groups: {sorted(dirs - GROUPS)}"


def test_modules_without_a_unit_test_file_are_the_reviewed_list():
    tested = {_tested(p) for p in _unit_tests()}
    untested = {m for m in _modules() if m not in tested}
    missing = sorted(untested - NO_UNIT_TEST_FILE.keys())
    stale = sorted(NO_UNIT_TEST_FILE.keys() - untested)
    assert not missing, ("modules without a unit test file: add tests/unit/<path>/"
                         "test_<module>.py, or list them in NO_UNIT_TEST_FILE with where "
                         f"they are tested: {missing}")
    assert not stale, (f"listed in NO_UNIT_TEST_FILE but they have a unit test file now, or "
                       f"no longer exist: {stale}")


def test_the_mirror_check_sees_an_orphan(tmp_path, monkeypatch):
    """The naming check is not vacuous."""
    me = sys.modules[__name__]
    (tmp_path / "cronrd" / "state").mkdir(parents=True)
    (tmp_path / "cronrd" / "state" / "run_life.py").write_text("")
    monkeypatch.setattr(me, "PKG", tmp_path / "cronrd")
    monkeypatch.setattr(me, "UNIT", tmp_path / "unit")
    unit = tmp_path / "unit"
    assert _tested(unit / "state" / "test_run_life.py") == "state/run_life.py"
    assert _tested(unit / "state" / "test_run_life_signals.py") == "state/run_life.py"
    assert _tested(unit / "state" / "test_state.py") == "state/"
    assert _tested(unit / "test_state.py") is None             # a package's test is inside it
    assert _tested(unit / "state" / "test_run_lifecycle.py") is None   # renamed module
    assert _tested(unit / "state" / "test_machine.py") is None
    assert _tested(unit / "raft" / "test_core.py") is None             # no such package
