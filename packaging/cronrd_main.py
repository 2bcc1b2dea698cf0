"""Entry point of the frozen binary (PyInstaller runs this file as __main__)."""
import sys

if sys.argv[1:2] == ["__forkserver"]:
    # The daemon's fork server of run supervisors (cronrd/runtime/runs/):
    # the binary has no `python -m`, so it is started as `cronrd __forkserver FD`.
    from cronrd.runtime.runs.supervisor import main as forkserver
    sys.exit(forkserver(sys.argv[2:]))

if sys.argv[1:2] == ["__parse-jobs"]:
    # The watcher's job-file parsers (cronrd/jobspec/worker.py).
    from cronrd.jobspec.worker import main as parse_jobs
    sys.exit(parse_jobs())

if sys.argv[1:2] == ["__faces"]:
    # The daemon's faces' process: the control socket and HTTP (cronrd/runtime/faces_child.py).
    from cronrd.runtime.faces_child import main as faces
    sys.exit(faces(sys.argv[2:]))

from cronrd.cli import main

sys.exit(main(prog_name="cronrd"))
