"""Which cronrd this is (``cronrd.release``): the version, and the commit
recorded at build time or read from the checkout."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cronrd import __version__, release

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh():
    release.commit.cache_clear()
    yield
    release.commit.cache_clear()


def test_a_checkout_names_its_head():
    if not (ROOT / ".git").exists():
        pytest.skip("not run from a git checkout")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert release.commit() == head
    assert release.describe() == f"{__version__} (commit {head[:12]})"


def test_the_recorded_commit_wins_and_garbage_is_ignored(tmp_path, monkeypatch):
    pkg = tmp_path / "cronrd"
    pkg.mkdir()
    monkeypatch.setattr(release, "__file__", str(pkg / "release.py"))
    assert release.commit() is None  # no record, and not the top of a checkout
    (pkg / "COMMIT").write_text("not a hash\n")
    release.commit.cache_clear()
    assert release.commit() is None
    (pkg / "COMMIT").write_text("ab" * 20 + "\n")
    release.commit.cache_clear()
    assert release.commit() == "ab" * 20
    assert release.describe() == f"{__version__} (commit {'ab' * 6})"


def test_cli_version_names_the_commit(tmp_path):
    from click.testing import CliRunner
    from cronrd.cli.base import main
    out = CliRunner().invoke(main, ["--version"]).output.strip()
    assert out == f"cronrd, version {release.describe()}"
