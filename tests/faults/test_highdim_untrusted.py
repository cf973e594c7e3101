"""The results file of ``meanfield highdim`` read back (:func:`meanfield.highdim.output.read_h5`)
is a file from someone else, as a run file is: a damaged or crafted one is one line
(:class:`meanfield.errors.RunFileError`), never a traceback, a hang or a read of another file.

Each case is read in a child process with a deadline: a damaged global heap made the plain
``h5py`` reader loop forever.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from support import damage_global_heap

from meanfield.highdim.experiment import TRIAL_FIELDS, StudyParams
from meanfield.highdim.output import write_h5

READ = """
import sys
from meanfield.errors import RunFileError
from meanfield.highdim.output import read_h5
try:
    doc = read_h5(sys.argv[1])
except RunFileError as exc:
    print("refused: " + str(exc))
else:
    print("read %d cells" % len(doc["cells"]))
"""

T, M, N, D = 2, 2, 3, 5


def _good(path) -> Path:
    params = StudyParams(neurons=M, ns=(N,), ds=(D,), trials=T)
    rng = np.random.default_rng(0)
    cell = {"n": N, "d": D, "eta": 0.1, "trace": float(D)}
    cell.update({name: rng.random(T) for name in TRIAL_FIELDS})
    cell.update(frozen=np.ones((T, M), bool), pattern=np.ones((T, M, N), bool),
                y=rng.random((T, N)), alpha=rng.random((T, M, N)), beta=rng.random((T, M, N)),
                alpha_star=rng.random((T, M, N)))
    return write_h5(path, params, [cell], {"cells": []})


def _read(path, timeout=60):
    r = subprocess.run([sys.executable, "-c", READ, str(path)], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    out = r.stdout.strip().splitlines()
    assert len(out) == 1, r.stdout
    return out[0]


def _external_link(path):
    with h5py.File(path, "a") as f:
        del f["cells/0/gap"]
        f["cells/0/gap"] = h5py.ExternalLink("/etc/passwd", "/x")


def _bad_json(path):
    with h5py.File(path, "a") as f:
        f.attrs["params_json"] = "{not json"


def _wrong_shape(path):
    with h5py.File(path, "a") as f:
        del f["cells/0/pattern"]
        f["cells/0/pattern"] = np.ones((T, M, N + 4), bool)


def _missing(path):
    with h5py.File(path, "a") as f:
        del f["cells/0/alpha_star"]


def _flipped(path):
    raw = bytearray(path.read_bytes())
    with h5py.File(path, "r") as f:
        at = f["cells/0/alpha"].id.get_chunk_info(0).byte_offset   # its one chunk
    raw[at + 5] ^= 0x10
    path.write_bytes(bytes(raw))


def _truncated(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _soft_cells(path):
    with h5py.File(path, "a") as f:
        f["cells"].move("0", "zero")
        f["cells/0"] = h5py.SoftLink("/cells/zero")


CASES = {
    "external_link": (_external_link, ["cells/0/gap", "external link", "/etc/passwd"]),
    "bad_json": (_bad_json, ["params_json", "not JSON"]),
    "wrong_shape": (_wrong_shape, ["cells/0/pattern", "shape (2, 2, 7)", "expected (2, 2, 3)"]),
    "missing": (_missing, ["cells/0/alpha_star", "missing"]),
    "flipped": (_flipped, ["cells/0/alpha", "checksum mismatch"]),
    "truncated": (_truncated, ["not a readable HDF5 file"]),
    "soft_link": (_soft_cells, ["cells/0", "soft link"]),
}


def test_a_good_file_reads(tmp_path):
    path = _good(tmp_path / "h.h5")
    assert _read(path) == "read 1 cells"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_damaged_or_crafted_file_is_one_line(tmp_path, name):
    make, needles = CASES[name]
    path = _good(tmp_path / "h.h5")
    make(path)
    line = _read(path)
    assert line.startswith(f"refused: {path}"), line
    for needle in needles:
        assert needle in line, line


@pytest.mark.slow
def test_a_damaged_global_heap_is_refused_within_the_deadline(tmp_path):
    """HDF5 loops forever reading a variable-length string from a damaged global heap (every
    string attribute of this file is one): the reader refuses it in time."""
    from meanfield.store import trust
    path = _good(tmp_path / "h.h5")
    damage_global_heap(path)
    line = _read(path, timeout=trust.ATTRIBUTE_DEADLINE + 40)
    assert line.startswith(f"refused: {path}"), line
    assert "did not finish reading" in line or "crashes HDF5" in line or "damaged" in line, line
