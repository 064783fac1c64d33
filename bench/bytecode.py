"""The code under test as an installed copy has it: compiled to bytecode.

pip compiles a package's modules when it installs it, and an editable install
(the one .ci/run makes, which the benchmarks run) is compiled by its first
import, unless PYTHONDONTWRITEBYTECODE is set (as on the machine of this
directory's figures): then every process compiles its 50-90 shell_kernel
modules again, 50 ms of each `run`'s start-up, a cost that no installed copy
and none of the contenders (compiled when pip installed them) pays. The
compiled files go to the checkout's __pycache__ directories (git-ignored);
Python reads them whatever PYTHONDONTWRITEBYTECODE says."""

from __future__ import annotations

import compileall
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compile_package(checkout: Path = REPO) -> None:
    """Compile checkout's shell_kernel package, as pip would; a module
    that does not compile fails here, loudly."""
    if not compileall.compile_dir(str(checkout / "shell_kernel"), quiet=1):
        raise RuntimeError(f"{checkout}/shell_kernel does not compile")
