"""What wrote a run file: the versions of the package and of its numerical dependencies,
and the git commit of the source if any."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import h5py
import numba
import numpy as np
import scipy

from meanfield._version import __version__


def provenance() -> dict:
    """Versions of the package and its numerical dependencies, and the git commit if any."""
    info = {"meanfield": __version__, "numpy": np.__version__, "numba": numba.__version__,
            "scipy": scipy.__version__, "h5py": h5py.__version__,
            "python": platform.python_version()}
    try:
        here = Path(__file__).resolve().parent
        # every standard stream of git is its own (a pipe, os.devnull): it writes into no
        # file of the run, whatever descriptors this process was started with
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             stdin=subprocess.DEVNULL, text=True, timeout=5)
        if out.returncode == 0:
            info["git_commit"] = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info
