"""packaging/releases.txt, CHANGELOG.md and the Debian changelog agree
(issue 31): each recorded release names a commit of this history whose
cronrd/__init__.py is that version, oldest first, none newer than the code;
each has its CHANGELOG section."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cronrd import __version__

ROOT = Path(__file__).resolve().parents[2]


def releases() -> list[tuple[str, str]]:
    out = []
    for line in (ROOT / "packaging" / "releases.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, commit = line.split()
            out.append((version, commit))
    return out


def key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def test_releases_are_semantic_versions_and_full_hashes_oldest_first():
    rel = releases()
    assert rel, "packaging/releases.txt records no release"
    for version, commit in rel:
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
        assert re.fullmatch(r"[0-9a-f]{40}", commit), commit
    assert [key(v) for v, _ in rel] == sorted({key(v) for v, _ in rel})
    assert key(rel[-1][0]) <= key(__version__)


def test_each_release_commit_is_in_the_history_at_its_version():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True).stdout.strip() == "true"
    for version, commit in releases():
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:cronrd/__init__.py"],
                               capture_output=True, text=True)
        if shown.returncode != 0 and shallow:
            pytest.skip("a shallow clone does not hold the release commits")
        assert shown.returncode == 0, f"release {version}: commit {commit} is not in this history"
        assert f'__version__ = "{version}"' in shown.stdout


def test_each_release_has_its_changelog_sections():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    debian = (ROOT / "packaging" / "debian" / "changelog").read_text()
    for version, _ in releases():
        assert f"\n## {version}\n" in changelog, f"CHANGELOG.md has no section for {version}"
        assert f"cronrd ({version})" in debian
    assert f"cronrd ({__version__})" in debian.splitlines()[0]
