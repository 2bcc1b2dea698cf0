"""Layering (DESIGN.md, "Layers"): the core imports nothing from the runtime
or the CLI, and the pure decisions and Raft read no clock, socket or file.

Every module under cronrd/ belongs to one layer in ``LAYERS``, from the inside
out; a module may import only from its own layer and the layers inside it. A
new module or package is in no layer until it is put in one here."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "cronrd"

# From the inside out. Entries are packages (directories) or modules under cronrd/.
LAYERS = {
    "core": ["__init__.py", "errors.py", "ids.py", "bounded_yaml.py", "crontab_import.py", "model",
             "raft", "state", "decisions", "schedule", "jobspec", "explain", "ops"],
    "config": ["config", "release.py"],   # release: which build this is (reads a file, may ask git)
    "runtime": ["runtime"],                 # the edges and the daemon, runtime/runs/ too
    "cli": ["cli", "client.py", "offline.py", "__main__.py"],
}
CORE = LAYERS["core"]
OUTER = ("cronrd.runtime", "cronrd.cli", "cronrd.client", "cronrd.offline", "cronrd.config")
IMPURE = ("asyncio", "socket", "time", "os", "subprocess", "threading", "random")


def _modules(parts):
    for part in parts:
        p = PKG / part
        yield from (sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.exists() else [])


def _imports(path: Path):
    """(line, dotted name) of every import, at any depth (in functions too).
    ``from X import a`` gives ``X.a`` as well as ``X``, so that
    ``from cronrd import cli`` and ``from .. import runtime`` are seen."""
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
            for a in node.names:
                if a.name != "*":
                    yield node.lineno, f"{name}.{a.name}"


def _dotted(entry: str) -> str:
    return "cronrd." + entry.removesuffix(".py").replace("/", ".")


def _within(name: str, dotted: str) -> bool:
    return name == dotted or name.startswith(dotted + ".")


def _layer_of_name(name: str) -> int | None:
    """The layer of an imported cronrd module (None: not cronrd, or cronrd itself)."""
    best = None
    for i, entries in enumerate(LAYERS.values()):
        for e in entries:
            d = "cronrd" if e == "__init__.py" else _dotted(e)
            if d != "cronrd" and _within(name, d) and (best is None or len(d) > len(best[1])):
                best = (i, d)
    return best[0] if best else None


def _layer_violations():
    for i, (layer, entries) in enumerate(LAYERS.items()):
        for p in _modules(entries):
            for line, name in _imports(p):
                j = _layer_of_name(name)
                if j is not None and j > i:
                    yield (f"{p.relative_to(PKG.parent)}:{line}: {name} "
                           f"({layer} imports {list(LAYERS)[j]})")


def test_the_core_imports_nothing_from_the_runtime_or_the_cli():
    bad = [f"{p.relative_to(PKG.parent)}:{line}: {name}" for p in _modules(CORE)
           for line, name in _imports(p) if name.startswith(OUTER)]
    assert not bad, "core modules import outer layers:\n" + "\n".join(bad)


def test_every_module_is_in_exactly_one_layer():
    placed = [p for p in _modules(e for entries in LAYERS.values() for e in entries)]
    every = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)
    twice = sorted({str(p.relative_to(PKG)) for p in placed if placed.count(p) > 1})
    missing = [str(p.relative_to(PKG)) for p in every if p not in placed]
    assert not missing, f"modules in no layer (put them in LAYERS): {missing}"
    gone = [e for entries in LAYERS.values() for e in entries if not (PKG / e).exists()]
    assert not gone, f"LAYERS names what is not in cronrd/: {gone}"
    assert not twice, f"modules in two layers: {twice}"


def test_no_layer_imports_from_a_layer_outside_it():
    bad = list(_layer_violations())
    assert not bad, "imports from an outer layer:\n" + "\n".join(bad)


def test_the_core_imports_nothing_dynamically():
    """So that the static check above cannot be walked around."""
    bad = []
    for p in _modules(CORE):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in ("import_module", "__import__"):
                    bad.append(f"{p.relative_to(PKG.parent)}:{node.lineno}")
            if isinstance(node, ast.Name) and node.id == "importlib":
                bad.append(f"{p.relative_to(PKG.parent)}:{node.lineno}")
    assert not bad, f"dynamic imports in the core: {sorted(set(bad))}"


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
    for bad in ("from cronrd import cli", "from .. import runtime", "import cronrd.client",
                "from cronrd.runtime.runs import executor", "def f():\n    import cronrd.cli",
                "from ..config import load_config"):
        (fake / "bad.py").write_text(bad + "\n")
        assert [v for v in _layer_violations() if "decisions/bad.py" in v], bad
    (fake / "bad.py").write_text("from cronrd import errors, ids\nfrom ..state import commands\n")
    assert not list(_layer_violations())
    assert _layer_of_name("cronrd.client") == 3 and _layer_of_name("cronrd.cli") == 3
    assert _layer_of_name("cronrd.runtime.runs.executor") == 2 and _layer_of_name("cronrd") is None


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


# The runtime's wings, from the top floor down (issue 30): a wing imports
# only the wings on floors below its own. Wings on one floor import neither
# the other. The faces' and the daemon's wiring (daemon.py, faces*.py) sit
# above every wing; the root's utilities (tasks, clock, storage, ...) below.
WINGS = [["http"], ["control"], ["leader"], ["cluster", "worker"], ["jobfiles", "notify"],
         ["log", "runs"], ["peers"]]
ROOT_TOP = {"daemon", "faces", "faces_host", "faces_child"}


def _wing_of(name: str) -> str | None:
    """The runtime wing (or "root:<module>") of a dotted cronrd name."""
    parts = name.split(".")
    if parts[:2] != ["cronrd", "runtime"] or len(parts) < 3:
        return None
    if any(parts[2] in floor for floor in WINGS):
        return parts[2]
    return "root:" + parts[2]


def _floor(wing: str) -> int | None:
    return next((i for i, floor in enumerate(WINGS) if wing in floor), None)


def _wing_violations(pkg: Path = PKG):
    for path in sorted((pkg / "runtime").rglob("*.py")):
        rel = path.relative_to(pkg).with_suffix("").parts
        src = _wing_of(".".join(("cronrd",) + rel))
        for line, name in _imports(path):
            dst = _wing_of(name)
            if dst is None or dst == src or src is None:
                continue
            where = f"{path.relative_to(pkg.parent)}:{line}: {name}"
            if src.startswith("root:"):
                if src[5:] not in ROOT_TOP and not dst.startswith("root:"):
                    yield f"{where} (runtime/{src[5:]}.py is below every wing)"
                continue
            if dst.startswith("root:"):
                if dst[5:] in ROOT_TOP:
                    yield f"{where} ({src}/ imports the wiring above it)"
                continue
            if _floor(dst) <= _floor(src):
                yield f"{where} ({src}/ imports {dst}/, which is not below it)"


def test_runtime_wings_import_only_downward():
    bad = list(_wing_violations())
    assert not bad, ("imports against the wing order "
                     f"{' -> '.join('/'.join(f) for f in WINGS)}:\n" + "\n".join(bad))


def test_every_runtime_package_is_a_wing():
    """A new subpackage of runtime/ is given a floor here, or it is unchecked."""
    dirs = sorted(p.name for p in (PKG / "runtime").iterdir()
                  if p.is_dir() and (p / "__init__.py").exists())
    assert dirs == sorted(w for floor in WINGS for w in floor)


def test_the_wing_check_sees_a_violation(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "PKG", tmp_path / "cronrd")
    fake = tmp_path / "cronrd" / "runtime"
    for wing in ("runs", "control", "log"):
        (fake / wing).mkdir(parents=True)
    (fake / "clock.py").write_text("")
    cases = {"runs/bad.py": "from ..control.handlers import Handlers\n",
             "log/bad.py": "from ..runs import executor\n",
             "control/bad.py": "from ..faces import CoreBridge\n",
             "clock.py": "from .control import handlers\n"}
    for path, text in cases.items():
        (fake / path).write_text(text)
        assert [v for v in _wing_violations(tmp_path / "cronrd") if path in v], path
        (fake / path).write_text("")
    (fake / "control" / "ok.py").write_text("from ..runs import executor\nfrom ..clock import "
                                            "Clock\nfrom . import ok\n")
    assert not list(_wing_violations(tmp_path / "cronrd"))


CLOCK_READS = {("time", "time"), ("time", "monotonic"), ("time", "perf_counter"),
               ("time", "time_ns"), ("time", "monotonic_ns"), ("datetime", "now"),
               ("datetime", "utcnow"), ("date", "today")}


def _clock_reads(pkg: Path = PKG):
    for path in sorted(pkg.rglob("*.py")):
        rel = str(path.relative_to(pkg.parent))
        if rel == "cronrd/runtime/clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and (node.value.id, node.attr) in CLOCK_READS:
                yield f"{rel}:{node.lineno}: {node.value.id}.{node.attr}"
            if isinstance(node, ast.ImportFrom) and node.module == "time" and any(
                    a.name in {"time", "monotonic", "perf_counter"} for a in node.names):
                yield f"{rel}:{node.lineno}: from time import ..."


def test_no_clock_is_read_outside_the_clock_module():
    """Issue 30: time is read through runtime/clock.py (a Clock, or its now()
    and monotonic()), so a test can give any part of cronrd its own time."""
    bad = list(_clock_reads())
    assert not bad, "clock reads outside cronrd/runtime/clock.py:\n" + "\n".join(bad)


def test_the_clock_check_sees_a_read(tmp_path):
    (tmp_path / "cronrd").mkdir()
    (tmp_path / "cronrd" / "x.py").write_text("import time\nstart = time.monotonic\n")
    assert list(_clock_reads(tmp_path / "cronrd"))
    (tmp_path / "cronrd" / "x.py").write_text("from time import monotonic\n")
    assert list(_clock_reads(tmp_path / "cronrd"))
    (tmp_path / "cronrd" / "x.py").write_text("import time\ntime.sleep(0)\n")
    assert not list(_clock_reads(tmp_path / "cronrd"))
