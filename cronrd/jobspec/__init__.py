"""Job files -> frozen ``JobSpec`` values; every problem carries FILE:LINE:COL.

Job files live in one directory (``/etc/cronrd.d`` by default). Each
``*.yaml`` / ``*.yml`` file holds either one job (a mapping; the job is named
after the file stem unless ``name:`` says otherwise) or ``jobs:``, a list of
job mappings that each carry a ``name:``.

The YAML is composed into a node tree with ``yaml.SafeLoader`` and walked by
hand, so every key and value keeps its position and every problem can point
at it. Reading is bounded (``bounded_yaml``): a file over 1 MiB, nesting
deeper than 64 levels, more than 1,000 aliases or a tree that expands past
1,000,000 values is refused as a problem of that file, and any exception
while loading one file is a problem of that file too. Problems are collected, not raised: a file with one bad job still
yields its good jobs, and ``cronrd validate`` can show every mistake at once.

Conventions:

* Positions in ``Problem`` are 1-based; line 0 / column 0 means "the whole
  file" (permissions, missing directory).
* ``null`` is accepted only where it is a meaningful value: ``timeout``
  (no timeout), ``timezone`` (the daemon's zone), ``user``, ``group`` and
  ``working_dir`` (inherit from the daemon). Elsewhere it is an error that
  says to remove the key to get the default.
* YAML 1.1 booleans (``no``, ``off``, ``yes``...) where a word is expected are
  type errors that name the expected values.
* A ``jobs:`` file may carry extra top-level keys starting with ``x-``; they
  are ignored and exist to hold ``&anchors`` for ``<<:`` merge keys.

Modules: ``model`` (JobSpec and its defaults, results), ``nodes`` (reading a
YAML node tree with positions), ``fields`` (one validator per job key),
``parse`` (a file's text -> jobs and problems), ``files`` (permissions,
reading files and directories), ``dependencies`` (depends_on across a
directory: unknown parents and cycles).
"""

from __future__ import annotations

from .fields import JOB_KEYS, MAX_DURATION, MAX_RETRIES
from .files import (MAX_FILE_BYTES, check_file_permissions, is_job_file_name, load_job_file,
                    load_jobs_dir)
from .model import (DEFAULT_JOBS_DIR, ENV_KEY_RE, NAME_RE, DirResult, ExecutorSpec,
                    FileResult, JobSpec, Limits, Param, Problem, RetryPolicy, RunOn)
from .parse import MAX_PROBLEMS_PER_FILE, parse_job_text

__all__ = [
    "RetryPolicy",
    "RunOn",
    "JobSpec",
    "Limits",
    "ExecutorSpec",
    "Param",
    "Problem",
    "FileResult",
    "DirResult",
    "NAME_RE",
    "ENV_KEY_RE",
    "DEFAULT_JOBS_DIR",
    "MAX_FILE_BYTES",
    "JOB_KEYS",
    "is_job_file_name",
    "parse_job_text",
    "load_job_file",
    "check_file_permissions",
    "load_jobs_dir",
    "MAX_DURATION",
    "MAX_RETRIES",
    "MAX_PROBLEMS_PER_FILE",
]
