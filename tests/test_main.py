"""``python -m meanfield`` from a folder holding a user's own ``analysis.py`` / ``solvers.py``."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STRAY = 'raise SystemExit("the stray {} was imported")\n'


def _folder(tmp_path):
    for name in ("analysis", "solvers"):
        (tmp_path / f"{name}.py").write_text(STRAY.format(name))
    return tmp_path


def _run(cwd, pythonpath):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, pythonpath))}
    return subprocess.run([sys.executable, "-m", "meanfield", "dichotomies",
                           str(ROOT / "data" / "plane8.csv"), "--json"],
                          cwd=cwd, env=env, capture_output=True, text=True)


def test_stray_modules_in_the_current_folder_are_ignored(tmp_path):
    out = _run(_folder(tmp_path), [ROOT])
    assert out.returncode == 0, out.stderr
    assert '"P": 58' in out.stdout


def test_a_collision_that_remains_is_one_line_and_exit_2(tmp_path):
    folder = _folder(tmp_path)
    out = _run(folder, [folder, ROOT])          # the stray modules come first on the path
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "shadows the package" in lines[0], out.stderr
    assert "stray" not in out.stderr            # refused before importing them
