"""The seam of state/writes.py: the state machine is what alerts,
dependencies and downstream take it for (a renamed or re-signed helper
fails here, not inside an apply)."""

from __future__ import annotations

import inspect

from cronrd.state import writes
from cronrd.state.machine import StateMachine


def members():
    proto = writes.MachineWrites
    return [n for n, v in vars(proto).items() if inspect.isfunction(v) and not n.startswith("__")]


def test_the_machine_has_every_helper_the_seam_names_with_its_parameters():
    names = members()
    assert "_insert_run" in names and "_get_run" in names
    for name in names:
        ours = inspect.signature(getattr(writes.MachineWrites, name))
        theirs = inspect.signature(getattr(StateMachine, name))
        assert list(ours.parameters) == list(theirs.parameters), name
        for p in ours.parameters.values():
            assert p.kind == theirs.parameters[p.name].kind, (name, p.name)
            assert p.default == theirs.parameters[p.name].default, (name, p.name)


def test_the_modules_that_borrow_them_never_import_the_machine():
    import ast
    from pathlib import Path
    state = Path(writes.__file__).parent
    for mod in ("alerts.py", "dependencies.py", "downstream.py"):
        tree = ast.parse((state / mod).read_text())
        froms = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert "machine" not in froms and "cronrd.state.machine" not in froms, mod


def test_the_machine_has_the_connection_the_seam_names():
    assert "conn" in writes.MachineWrites.__annotations__
    sm = StateMachine.__init__
    assert "self.conn" in inspect.getsource(sm)
