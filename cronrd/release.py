"""Which cronrd this is: the version (``cronrd.__version__``) and the commit
it was built from, as ``cronrd --version`` and ``cronrd status`` name them.

The commit is the one setup.py recorded in ``cronrd/COMMIT`` when the
package was built from a git checkout (a wheel, the build venv of the
binary and the .deb); else, for an editable install or a checkout run in
place, the checkout's HEAD; else unknown.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess

from . import __version__

_HEX = re.compile(r"[0-9a-f]{40}")


@functools.lru_cache(maxsize=1)
def commit() -> str | None:
    """The full commit hash, or None if it cannot be known."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "COMMIT"), encoding="ascii") as f:
            text = f.read().strip()
        if _HEX.fullmatch(text):
            return text
    except OSError:
        pass
    if not os.path.isdir(os.path.join(os.path.dirname(here), ".git")) and \
            not os.path.isfile(os.path.join(os.path.dirname(here), ".git")):
        return None  # not the top of a checkout (a worktree has a .git file)
    try:
        out = subprocess.run(["git", "-C", os.path.dirname(here), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = out.stdout.strip()
    return text if out.returncode == 0 and _HEX.fullmatch(text) else None


def describe() -> str:
    """``0.2.0 (commit 0123456789ab)``, or the version alone."""
    c = commit()
    return f"{__version__} (commit {c[:12]})" if c else __version__
