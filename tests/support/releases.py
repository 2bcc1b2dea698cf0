"""The previous recorded release's code (packaging/releases.txt), for the
tests that run it beside this checkout's: the newest recorded release whose
commit is not HEAD, its cronrd/ taken from git (git archive) and run with
this interpreter (the same dependencies)."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from harness import REPO


def previous_release() -> tuple[str, str] | None:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    found = None
    for line in (REPO / "packaging" / "releases.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, commit = line.split()
            if commit != head:
                found = (version, commit)
    return found


def extract_previous(root: Path) -> Path:
    """The previous release's package under ``root`` (skips the test where
    git history does not hold it: not a checkout, or a shallow clone)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the previous release comes from git")
    rel = previous_release()
    if rel is None:
        pytest.skip("packaging/releases.txt records no release older than HEAD")
    version, commit = rel
    tar = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit, "cronrd"],
                         capture_output=True)
    if tar.returncode != 0:
        pytest.skip(f"release {version} ({commit[:12]}) is not in this clone's history "
                    f"(shallow?): {tar.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
        t.extractall(root, filter="data")
    (root / "cronrd" / "COMMIT").write_text(commit + "\n")  # its --version names it
    return root
