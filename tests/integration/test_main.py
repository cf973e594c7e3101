"""``python -m meanfield`` from a folder holding a user's own ``analysis.py`` / ``solvers.py``."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STRAY = 'raise SystemExit("the stray {} was imported")\n'


def _folder(tmp_path):
    for name in ("analysis", "solvers"):
        (tmp_path / f"{name}.py").write_text(STRAY.format(name))
    return tmp_path


def _run(cwd, pythonpath):
    """The installed ``python -m meanfield``, as a user starts it (the current folder first on
    ``sys.path``), with ``pythonpath`` before any inherited ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(map(str, [*pythonpath, *inherited]))
    return subprocess.run([sys.executable, "-m", "meanfield", "dichotomies",
                           str(ROOT / "data" / "plane8.csv"), "--target", "y", "--json"],
                          cwd=cwd, env=env, capture_output=True, text=True)


def test_stray_modules_in_the_current_folder_are_ignored(tmp_path):
    out = _run(_folder(tmp_path), [])
    assert out.returncode == 0, out.stderr
    assert '"P": 58' in out.stdout


def test_a_collision_that_remains_is_one_line_and_exit_2(tmp_path):
    folder = _folder(tmp_path)
    out = _run(folder, [folder])                # the stray modules come first on the path
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "shadows the package" in lines[0], out.stderr
    assert "stray" not in out.stderr            # refused before importing them
