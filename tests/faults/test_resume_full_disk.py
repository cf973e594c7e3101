"""``run --resume`` after SIGKILL on a full disk.

A run killed by SIGKILL leaves its ``RUN.h5.part`` marked open by its SWMR writer; the resume
rewrites it into ``RUN.h5.part.tmp`` before it can append. On a full disk (simulated, as in
``test_bad_inputs.full_disk``, by a file-size limit: ``write()`` fails with EFBIG) that copy
fails: the resume must say so in one line (exit 2, no traceback), leave no ``.part.tmp``
behind, leave the run's files as they were, and a later resume with space must finish it.
"""

from __future__ import annotations

import resource
import signal

import pytest
from support import KILL, run_cli, start, the_line, wait_for

pytestmark = pytest.mark.slow


def _full_disk():
    """In the child: a file-size limit of 64 KiB (SIGXFSZ ignored: write() then fails), and
    the default SIGINT/SIGHUP as :func:`support.start` gives."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))


def test_a_full_disk_during_resume_after_sigkill_leaves_nothing_behind(tmp_path):
    import subprocess
    import sys

    from support import _env
    cfg = tmp_path / "k.toml"
    cfg.write_text(KILL.replace("steps_per_tau = 2000", "steps_per_tau = 20000"))
    out = tmp_path / "k.h5"
    p = start(["run", cfg, "-o", out, "--quiet"], tmp_path)
    ckpt = out.with_name("k.h5.ckpt")
    assert wait_for(ckpt.exists, p)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    part = out.with_name("k.h5.part")
    assert part.exists() and ckpt.exists() and not out.exists()
    before = {q.name: q.read_bytes() for q in (part, ckpt)}

    r = subprocess.run([sys.executable, "-m", "meanfield", "run", str(cfg), "-o", str(out),
                        "--resume", "--quiet"], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=300, preexec_fn=_full_disk)
    line = the_line(r.stderr, r.returncode, 2)
    assert line.startswith(f"meanfield: error: {part}: cannot write the copy"), line
    assert "File too large" in line and "--resume" in line, line
    left = sorted(q.name for q in tmp_path.iterdir())
    assert left == ["k.h5.ckpt", "k.h5.part", "k.toml"], left     # no .part.tmp, no lock
    assert {q.name: q.read_bytes() for q in (part, ckpt)} == before

    r = run_cli(["run", cfg, "-o", out, "--resume", "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(q.name for q in tmp_path.iterdir()) == ["k.h5", "k.toml"]


MIDWAY = """
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
import meanfield.store.disk as disk
disk._fallocate = lambda fd, n: None      # a file system without posix_fallocate
resource.setrlimit(resource.RLIMIT_FSIZE, (300000, 300000))
from meanfield.errors import RunFileError
from meanfield.store import RunWriter
try:
    RunWriter(sys.argv[1], mode="a").close()
except RunFileError as exc:
    print(exc)
"""


def test_a_copy_that_fails_midway_leaves_nothing_either(tmp_path):
    """Where the space cannot be tried first, HDF5's own write fails in the middle of the
    copy: the same one line, and no copy left."""
    import subprocess
    import sys

    from support import _env
    cfg = tmp_path / "k.toml"
    cfg.write_text(KILL.replace("steps_per_tau = 2000", "steps_per_tau = 20000"))
    out = tmp_path / "k.h5"
    p = start(["run", cfg, "-o", out, "--quiet"], tmp_path)
    assert wait_for(out.with_name("k.h5.ckpt").exists, p)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    part = out.with_name("k.h5.part")
    assert part.stat().st_size > 300000
    before = part.read_bytes()
    r = subprocess.run([sys.executable, "-c", MIDWAY, str(part)], cwd=tmp_path, env=_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.strip() == (f"{part}: cannot write the copy that reopens it for appending "
                                "(File too large); nothing was changed: free space and "
                                "continue with --resume"), r.stdout
    assert not part.with_name("k.h5.part.tmp").exists()
    assert part.read_bytes() == before
