"""Only what pyproject.toml cannot say: the optional C run supervisor.

cronrd/runtime/runs/_supervise.c is built twice when a C compiler and
Python's headers are there:

- as the extension module ``_supervise`` that the fork server imports, and
- as the program ``cronrd-zygote`` beside it (the same file with
  CRONRD_ZYGOTE_PROGRAM defined, no Python in it): the process that forks the
  run supervisors. A program of its own holds ~100 kB of its own memory in
  a few mappings; a zygote forked from the fork server carries the
  interpreter's 6.5 MB and 74 mappings, which every supervisor fork copies
  and every supervisor exit tears down again.

Without a compiler the install goes on: without the program the fork server
forks its zygote from itself, and without the module it uses the Python
supervisor (same behaviour, more CPU per run: see the README).
"""

import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

SOURCE = "cronrd/runtime/runs/_supervise.c"
MODULE = "cronrd.runtime.runs._supervise"
PROGRAM = "cronrd-zygote"
FLAGS = ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]


class BuildExt(build_ext):
    """build_ext that also links the zygote program next to the module."""

    def _program_path(self) -> str:
        return os.path.join(os.path.dirname(self.get_ext_fullpath(MODULE)), PROGRAM)

    def run(self) -> None:
        super().run()
        if self.compiler is None or not os.path.exists(self.get_ext_fullpath(MODULE)):
            return  # the module was not built: the program would not be used
        out = self._program_path()
        try:
            objects = self.compiler.compile(
                [SOURCE], output_dir=os.path.join(self.build_temp, "zygote"),
                macros=[("CRONRD_ZYGOTE_PROGRAM", "1")], extra_postargs=FLAGS)
        except Exception as exc:  # optional, as the module is: say so and go on
            print(f"warning: {PROGRAM} not built ({exc}); the fork server will fork its "
                  "zygote from itself")
            return
        # Static where libc.a is there: 8 mappings instead of 24 and no
        # dynamic loading, so each supervisor fork copies, faults and tears
        # down less (~0.3 ms of CPU per run in bench/gate_window.py).
        for extra in (["-static"], []):
            try:
                self.compiler.link_executable(objects, PROGRAM, output_dir=os.path.dirname(out),
                                              extra_postargs=extra)
                return
            except Exception as exc:
                why = exc
        print(f"warning: {PROGRAM} not built ({why}); the fork server will fork its "
              "zygote from itself")

    def get_outputs(self) -> list[str]:
        out = self._program_path()
        return super().get_outputs() + ([out] if os.path.exists(out) else [])


class BuildPy(build_py):
    """build_py that records the commit the package is built from in
    cronrd/COMMIT (cronrd/release.py reads it), when built from a git
    checkout; the source tree is left alone."""

    def run(self) -> None:
        super().run()
        try:
            out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return
        text = out.stdout.strip()
        if out.returncode == 0 and len(text) == 40:
            target = os.path.join(self.build_lib, "cronrd", "COMMIT")
            with open(target, "w", encoding="ascii") as f:
                f.write(text + "\n")


setup(cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
      ext_modules=[Extension(MODULE, [SOURCE], extra_compile_args=FLAGS, optional=True)])
