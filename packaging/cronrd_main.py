"""Entry point of the frozen binary (PyInstaller runs this file as __main__)."""
import sys

if sys.argv[1:2] == ["__forkserver"]:
    # The daemon's fork server of run supervisors (cronrd/runtime/runs/):
    # the binary has no `python -m`, so it is started as `cronrd __forkserver FD`.
    from cronrd.runtime.runs.supervisor import main as forkserver
    sys.exit(forkserver(sys.argv[2:]))

from cronrd.cli import main

sys.exit(main(prog_name="cronrd"))
