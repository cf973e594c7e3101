"""Helpers shared by test files of several folders: run files compared bitwise, the CLI in a
subprocess, stop requests at chosen observation boundaries, one-line error checks.

(``tests/`` is on ``sys.path`` through ``conftest.py``, so any test file can import this one.)
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from conftest import tiny_toml

from meanfield import runner

KILL = """\
[data]
kind = "gaussian"
n = 6
d = 2
seed = 1
[model]
n_particles = 200
[dynamics]
lam = 0.05
eta = 0.05
taus = [1e-2, 1e-3]
steps_per_tau = 2000
seed = 3
[output]
observe_every = 25
snapshots_per_tau = 4
checkpoint_every = 200
"""


def h5_items(path) -> dict:
    """Every dataset and attribute of an HDF5 file as comparable bytes."""
    import h5py

    def attrs(obj):
        out = {}
        for k in obj.attrs:
            a = np.asarray(obj.attrs[k])
            out[k] = (a.dtype.str, a.shape, a.tobytes()) if a.dtype.kind != "O" else repr(a)
        return out

    items = {}
    with h5py.File(path, "r") as f:
        items["/@"] = attrs(f)

        def visit(name, obj):
            items[name + "/@"] = attrs(obj)
            if isinstance(obj, h5py.Dataset):
                a = obj[()]
                items[name] = (a.dtype.str, a.shape, a.tobytes())
        f.visititems(visit)
    return items


def assert_identical(ref, other):
    a, b = h5_items(ref), h5_items(other)
    assert sorted(a) == sorted(b)
    differ = [k for k in a if a[k] != b[k]]
    assert not differ, f"{other} differs from {ref} in {differ}"
    return len(a)


def leftovers(out: Path):
    return sorted(p.name for p in out.parent.iterdir()
                  if p.name.startswith(out.name) and p.name != out.name)


def stop_after(monkeypatch, k):
    """Make the run's stop request fire at the k-th observation boundary."""
    calls = {"n": 0}

    def fake(self):
        calls["n"] += 1
        return calls["n"] >= k
    monkeypatch.setattr(runner._StopRequest, "__call__", fake)


def _env():
    return dict(os.environ, NUMBA_NUM_THREADS="1")


def _default_signals():
    """In the child: SIGHUP and SIGINT back to their defaults. A suite started under
    ``nohup`` ignores SIGHUP, and one started in the background of a non-interactive shell
    ignores SIGINT; a command keeps an ignored signal ignored (docs/cli.md), so the tests of
    its handlers would otherwise see none."""
    for name in ("SIGHUP", "SIGINT"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)


def start(args, cwd):
    """``python -m meanfield ARGS`` started in ``cwd`` with pipes, one numba thread and the
    default SIGHUP and SIGINT dispositions."""
    return subprocess.Popen([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd,
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=_default_signals)


def run_cli(args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "meanfield", *map(str, args)], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=timeout)


def wait_for(cond, proc, timeout=120.0):
    """Poll ``cond`` until it holds (True), the process ends (then ``cond()`` once more) or
    ``timeout`` seconds pass (False)."""
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            return bool(cond())
        if time.monotonic() - t0 > timeout:
            return False
        time.sleep(0.005)
    return True


TINY = tiny_toml({"output.checkpoint_every": 100})


def checksums(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def the_line(err: str, code: int, want: int) -> str:
    """``err`` is one line without a traceback and the exit code is ``want``; the line."""
    assert code == want, err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def one_line(capsys, code, want=2):
    """The command's stderr is one line (no traceback) and it exited with ``want``."""
    return the_line(capsys.readouterr().err, code, want)


def auto_walk(lengths, T, every, per=1):
    """Step by step: ``(stage, step_in_stage, global step)`` of every observation boundary and
    of every frame of an auto ladder whose stages ran ``lengths`` steps (budget ``T``), with
    ``per`` frames per chunk (evenly spaced, the last at the chunk's end)."""
    from solvers.schedule import AUTO_CHUNKS
    c = T // AUTO_CHUNKS
    bounds = [c * k for k in range(AUTO_CHUNKS)] + [T]
    ends = set()
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        ends |= {lo + int(round((hi - lo) * (i + 1) / per)) for i in range(per)}
    obs, frames, start = [], [], 0
    for s, L in enumerate(lengths):
        for k in range(1, L + 1):
            snap = k in ends or k == L
            if k % every == 0 or snap:
                obs.append((s, k, start + k))
            if snap:
                frames.append((s, k, start + k))
        start += L
    return obs, frames


def old_format(src, dst) -> Path:
    """Copy the run file ``src`` to ``dst`` as the writer before checksums wrote it: every
    string attribute variable-length (in HDF5's global heap), no Fletcher-32 filter,
    ``/data/X`` and ``/data/y`` contiguous, the rows allocated early without fill."""
    import h5py

    def attrs(s, d):
        for k, v in s.attrs.items():
            d.attrs[k] = bytes(v).decode() if isinstance(v, (bytes, np.bytes_)) else v

    with h5py.File(src, "r") as fs, h5py.File(dst, "w", libver="latest") as fd:
        attrs(fs, fd)

        def copy(name, obj):
            if isinstance(obj, h5py.Group):
                out = fd.create_group(name)
            elif name.startswith("data/"):
                out = fd.create_dataset(name, data=obj[()])
            else:
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
                dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
                out = fd.create_dataset(name, shape=obj.shape, maxshape=obj.maxshape,
                                        dtype=obj.dtype, chunks=obj.chunks, dcpl=dcpl)
                out[...] = obj[()]
            attrs(obj, out)
        fs.visititems(copy)
    return Path(dst)


def damage_global_heap(path) -> int:
    """Zero the header of the first object of the first global heap collection (``GCOL``) of
    ``path``, the damage on which HDF5 loops forever reading a variable-length string; returns
    the collection's offset."""
    raw = bytearray(Path(path).read_bytes())
    at = raw.find(b"GCOL")
    assert at >= 0, f"{path} has no global heap"
    raw[at + 16:at + 32] = bytes(16)        # after the 16-byte collection header
    Path(path).write_bytes(bytes(raw))
    return at
