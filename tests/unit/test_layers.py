"""Layering (DESIGN.md, "Layers"): the core imports nothing from the runtime
or the CLI, and the pure decisions and Raft read no clock, socket or file."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "cronrd"
CORE = ["raft", "state", "decisions", "schedule", "jobspec", "bounded_yaml.py",
        "errors.py"]
OUTER = ("cronrd.runtime", "cronrd.cli", "cronrd.client", "cronrd.config")
IMPURE = ("asyncio", "socket", "time", "os", "subprocess", "threading", "random")


def _modules(parts):
    for part in parts:
        p = PKG / part
        yield from (sorted(p.rglob("*.py")) if p.is_dir() else [p])


def _imports(path: Path):
    pkg = "cronrd." + ".".join(path.relative_to(PKG).with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.rstrip(".").split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            yield node.lineno, name


def test_the_core_imports_nothing_from_the_runtime_or_the_cli():
    bad = [f"{p.relative_to(PKG.parent)}:{line}: {name}" for p in _modules(CORE)
           for line, name in _imports(p) if name.startswith(OUTER)]
    assert not bad, "core modules import outer layers:\n" + "\n".join(bad)


def test_decisions_and_raft_read_no_clock_socket_or_file():
    allowed = {"cronrd/raft/core.py": {"random"}}  # the Random it is given, as a type
    bad = []
    for p in _modules(["decisions", "raft"]):
        rel = str(p.relative_to(PKG.parent))
        for line, name in _imports(p):
            top = name.split(".")[0]
            if top in IMPURE and top not in allowed.get(rel, set()):
                bad.append(f"{rel}:{line}: {name}")
    assert not bad, "pure modules import I/O or time:\n" + "\n".join(bad)


def test_the_layer_check_sees_a_violation(tmp_path, monkeypatch):
    """The checker is not vacuous."""
    fake = tmp_path / "cronrd" / "decisions"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("import time\nfrom ..runtime import daemon\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "cronrd")
    names = [n for _, n in _imports(fake / "bad.py")]
    assert "time" in names and "cronrd.runtime" in names


def test_the_config_does_not_reach_into_the_runtime():
    """Issue 10: config.py imported runtime.tls (for the node-id rule and the
    TLS paths type); both live outside the runtime now (cronrd.ids, config)."""
    bad = [f"{p.relative_to(PKG.parent)}:{line}: {name}" for p in _modules(["config"])
           for line, name in _imports(p) if name.startswith("cronrd.runtime")]
    assert not bad, bad


def test_one_node_id_rule():
    from cronrd import ids
    assert ids.is_node_id("web-1.a_b") and not ids.is_node_id("-x") \
        and not ids.is_node_id("x" * 64) and not ids.is_node_id(7)
    assert "at most 63 characters" in ids.node_id_problem("bad id")
    for path in PKG.rglob("*.py"):
        if path.name != "ids.py":
            assert "[A-Za-z0-9._-]{0,61}" not in path.read_text(), path
