"""Only what pyproject.toml cannot say: the optional C run supervisor.

cronrd/runtime/runs/_supervise.c is built when a C compiler and Python's
headers are there; without them the install goes on and the fork server uses
the Python supervisor (same behaviour, more CPU per run: see the README).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("cronrd.runtime.runs._supervise",
                             ["cronrd/runtime/runs/_supervise.c"],
                             extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
                             optional=True)])
