"""A run file is untrusted input (docs/format.md, "Reading a file from someone else"): files
crafted with h5py that once were read silently (an external link, external raw storage, a
virtual dataset, a huge declared shape, a flipped bit, a wrong ``data_hash``) or hung every
reader (a damaged global heap) are refused by ``inspect``, ``analyze`` and ``run --resume``
with exit code 2 and one line naming the file, the object and why; a file written before
checksums still reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
from support import TINY, damage_global_heap, old_format, one_line, run_cli, start, stop_after

from meanfield import cli
from meanfield.errors import RunFileError
from meanfield.store import open_run, trust
from meanfield.store.layout import set_text

SEE = "refused (docs/format.md, 'Reading a file from someone else')"


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A folder with ``c.toml``, ``out.h5.part`` and ``out.h5.ckpt`` of the tiny run stopped
    at its 8th observation boundary, and ``full.h5``, the same run not stopped."""
    d = tmp_path_factory.mktemp("interrupted")
    (d / "c.toml").write_text(TINY)
    mp = pytest.MonkeyPatch()
    try:
        stop_after(mp, 8)
        assert cli.main(["run", str(d / "c.toml"), "-o", str(d / "out.h5"), "--quiet",
                         "--threads", "1"]) == 130
    finally:
        mp.undo()
    assert cli.main(["run", str(d / "c.toml"), "-o", str(d / "full.h5"), "--quiet",
                     "--threads", "1"]) == 0
    return d


def _copy(src: Path, tmp: Path, name="bad.h5") -> Path:
    dst = tmp / name
    shutil.copy(src, dst)
    return dst


def _flip(path: Path, dataset: str, chunk: int = 0, at: int = 3) -> None:
    """Flip one bit of the stored bytes of ``dataset`` (of its chunk ``chunk``)."""
    with h5py.File(path, "r") as f:
        ds = f[dataset]
        off = ds.id.get_chunk_info(chunk).byte_offset if ds.chunks else ds.id.get_offset()
    raw = bytearray(path.read_bytes())
    raw[off + at] ^= 0x10
    path.write_bytes(bytes(raw))


# ---------------------------------------------------------------------- the crafted files

def external_link(path, tmp):
    other = _copy(path, tmp, "other.h5")
    with h5py.File(other, "a") as f:
        f["data/y"][0] = 100.0
    with h5py.File(path, "a") as f:
        del f["data/y"]
        f["data/y"] = h5py.ExternalLink(str(other), "/data/y")
    return "data/y", f"an external link (to {other}:/data/y)"


def soft_link(path, tmp):
    with h5py.File(path, "a") as f:
        del f["data/y"]
        f["data/y"] = h5py.SoftLink("/observables/risk/value")
    return "data/y", "a soft link (to observables/risk/value)"


def external_storage(path, tmp):
    secret = tmp / "secret.bin"
    secret.write_bytes(struct.pack("<5d", 1, 2, 3, 4, 5))
    with h5py.File(path, "a") as f:
        del f["data/y"]
        f.create_dataset("data/y", shape=(5,), dtype="<f8", external=[(str(secret), 0, 40)])
    return "data/y", f"a dataset stored in an external file ({secret})"


def virtual_dataset(path, tmp):
    layout = h5py.VirtualLayout(shape=(5,), dtype="<f8")
    layout[:] = h5py.VirtualSource(str(tmp / "missing.h5"), "y", shape=(5,))
    with h5py.File(path, "a") as f:
        del f["data/y"]
        f.create_virtual_dataset("data/y", layout, fillvalue=0.0)
    return "data/y", "a virtual dataset"


def huge_shape(path, tmp):
    """A chunked, unwritten /data/X of 3e8 rows, the parameters saying so too."""
    with h5py.File(path, "a") as f:
        del f["data/X"]
        f.create_dataset("data/X", shape=(300_000_000, 2), dtype="<f8", chunks=(4096, 2))
        f["parameters"].attrs["n"] = 300_000_000
    return "data/X", "shape (300000000, 2) declares 4.8 GB, more than the whole file"


def huge_chunk(path, tmp):
    """Five values in one unwritten chunk of 800 MB."""
    with h5py.File(path, "a") as f:
        del f["data/y"]
        f.create_dataset("data/y", shape=(5,), dtype="<f8", maxshape=(None,),
                         chunks=(100_000_000,))
    return "data/y", "chunks of 800 MB, more than the whole file"


def shape_against_parameters(path, tmp):
    with h5py.File(path, "a") as f:
        del f["observables/residuals/value"]
        f.create_dataset("observables/residuals/value", data=np.zeros((32, 6)))
    return ("observables/residuals/value", "shape (32, 6) disagrees with the file's parameters "
            "(n = 5, d = 2, n_particles = 64: expected (rows, 5))")


def flipped_y(path, tmp):
    _flip(path, "data/y")
    return "data/y", "checksum mismatch (Fletcher-32)"


def flipped_observable(path, tmp):
    _flip(path, "observables/risk/value")
    return "observables/risk/value", "checksum mismatch (Fletcher-32)"


def wrong_data_hash(path, tmp):
    with h5py.File(path, "a") as f:
        set_text(f["parameters"], "data_hash", "0123456789abcdef")
    return "data/X, data/y", "the values do not match the stored data_hash"


def _edit(name, dataset, index, value, why):
    """A craft that writes ``value`` at ``index`` of ``dataset``: a row no run writes, refused
    naming the dataset and ``why``."""
    def craft(path, tmp):
        with h5py.File(path, "a") as f:
            f[dataset][index] = value
        return dataset, why
    craft.__name__ = name
    return craft


stage_outside_the_ladder = _edit(
    "stage_outside_the_ladder", "particles/neurons/stage/value", 1, 7,
    "row 1: stage 7 outside the ladder's 2 temperatures; no run writes this")
negative_temperature = _edit(
    "negative_temperature", "particles/neurons/temperature/value", 0, -1.0,
    "row 0: tau = -1.0 is not a temperature (finite, >= 0)")
nan_residual = _edit("nan_residual", "observables/residuals/value", (20, 3), np.nan,
                     "row 20: nan is not finite")
frame_of_another_temperature = _edit(
    "frame_of_another_temperature", "particles/neurons/temperature/value", 2, 0.5,
    "row 2: tau = 0.5, but the frame is of stage 0 at tau = 0.01 (dynamics.taus)")
stage_going_back = _edit("stage_going_back", "particles/neurons/stage/value", 4, 0,
                         "row 4: stage 0 after stage 1")
negative_risk = _edit("negative_risk", "observables/risk/value", 5, -1.0,
                      "row 5: -1.0 is negative")


def steps_reversed(path, tmp):
    with h5py.File(path, "a") as f:
        ds = f["particles/neurons/position/step"]
        n = int(f.attrs["n_frames"])
        ds[:n] = ds[:n][::-1]
    return "particles/neurons/position/step", "(steps must increase)"


def lam_attribute(path, tmp):
    with h5py.File(path, "a") as f:
        f["parameters"].attrs["lam"] = -1.0
    return "parameters.lam", "-1.0 disagrees with the stored config (0.05)"


def edited_config(path, tmp):
    """lam changed in the stored config and in its attribute alike: the config_hash stays."""
    import json
    with h5py.File(path, "a") as f:
        cfg = json.loads(f["parameters"].attrs["config_json"])
        cfg["dynamics"]["lam"] = 0.5
        set_text(f["parameters"], "config_json", json.dumps(cfg, sort_keys=True,
                                                            separators=(",", ":")))
        f["parameters"].attrs["lam"] = 0.5
    return "parameters.config_json", "does not match the stored config_hash"


CASES = [external_link, soft_link, external_storage, virtual_dataset, huge_shape, huge_chunk,
         shape_against_parameters, flipped_y, flipped_observable, wrong_data_hash,
         stage_outside_the_ladder, negative_temperature, nan_residual, steps_reversed,
         lam_attribute, edited_config, frame_of_another_temperature, stage_going_back,
         negative_risk]


@pytest.mark.parametrize("craft", CASES, ids=lambda c: c.__name__)
def test_inspect_refuses_a_crafted_file_in_one_line(tiny_run_file, tmp_path, capsys, craft):
    bad = _copy(tiny_run_file[1], tmp_path)
    where, why = craft(bad, tmp_path)
    line = one_line(capsys, cli.main(["inspect", str(bad)]))
    assert line.startswith(f"meanfield: error: {bad}: {where}: "), line
    assert why in line, line


@pytest.mark.parametrize("craft", [external_link, external_storage, virtual_dataset,
                                   huge_shape, flipped_y, wrong_data_hash,
                                   stage_outside_the_ladder, nan_residual],
                         ids=lambda c: c.__name__)
def test_analyze_refuses_a_crafted_file_and_writes_nothing(tiny_run_file, tmp_path, capsys,
                                                           craft):
    bad = _copy(tiny_run_file[1], tmp_path)
    where, why = craft(bad, tmp_path)
    line = one_line(capsys, cli.main(["analyze", str(bad), "-o", str(tmp_path / "rep"),
                                      "--no-w2", "--no-references", "--no-figures"]))
    assert line.startswith(f"meanfield: error: {bad}: {where}: ") and why in line, line
    assert not (tmp_path / "rep").exists()


@pytest.mark.parametrize("craft", [external_link, external_storage, virtual_dataset,
                                   huge_shape, flipped_y, wrong_data_hash],
                         ids=lambda c: c.__name__)
def test_resume_refuses_a_crafted_part_and_changes_nothing(interrupted, tmp_path, capsys,
                                                           craft):
    for name in ("c.toml", "out.h5.part", "out.h5.ckpt"):
        shutil.copy(interrupted / name, tmp_path / name)
    part = tmp_path / "out.h5.part"
    where, why = craft(part, tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    line = one_line(capsys, cli.main(["run", str(tmp_path / "c.toml"), "-o",
                                      str(tmp_path / "out.h5"), "--resume", "--quiet",
                                      "--threads", "1"]))
    assert line.startswith(f"meanfield: error: {part}: {where}: ") and why in line, line
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_flipped_bit_in_a_frame_names_the_frame(tiny_run_file, tmp_path, capsys):
    bad = _copy(tiny_run_file[1], tmp_path)
    _flip(bad, "particles/neurons/position/value", chunk=2, at=100)
    assert open_run(bad).n_frames == 6                # the frames are read one at a time
    line = one_line(capsys, cli.main(["analyze", str(bad), "-o", str(tmp_path / "rep"),
                                      "--no-w2", "--no-references", "--no-figures"]))
    assert line == (f"meanfield: error: {bad}: frame 2: particles/neurons/position/value: "
                    "checksum mismatch (Fletcher-32): the stored data was changed after it was "
                    "written; the file is damaged")


def test_a_particle_that_overflows_is_refused_naming_it(tiny_run_file, tmp_path, capsys):
    # finite but |theta|^2 = inf: no run writes it (it stops as diverged first); read, it gave
    # overflow warnings and J = 0
    bad = _copy(tiny_run_file[1], tmp_path)
    with h5py.File(bad, "a") as f:
        f["particles/neurons/position/value"][3, 17, 1] = 1e200
    line = one_line(capsys, cli.main(["analyze", str(bad), "-o", str(tmp_path / "rep"),
                                      "--no-w2", "--no-references", "--no-figures"]))
    assert line.startswith(f"meanfield: error: {bad}: frame 3: particles/neurons/position/value: "
                           "particle 17 overflows"), line
    assert not (tmp_path / "rep").exists()


def test_a_frame_read_later_follows_no_link(tiny_run_file, tmp_path):
    """The frames are read after open_run, one file open each: a link put in since is refused
    there too."""
    bad = _copy(tiny_run_file[1], tmp_path)
    run = open_run(bad)
    other = _copy(tiny_run_file[1], tmp_path, "other.h5")
    with h5py.File(bad, "a") as f:
        del f["particles/neurons/position"]
        f["particles/neurons/position"] = h5py.ExternalLink(str(other),
                                                            "/particles/neurons/position")
    with pytest.raises(RunFileError, match="particles/neurons/position: an external link, "
                                           "where a run file has a hard link"):
        run.frame(0)


def test_the_huge_declared_shape_is_refused_from_the_command_line(tiny_run_file, tmp_path):
    """The 108 KB file that declared 4.8 GB of /data/X (``inspect`` grew to 15 GB): refused
    at once, the parameters disagreeing or not."""
    bad = _copy(tiny_run_file[1], tmp_path)
    with h5py.File(bad, "a") as f:
        del f["data/X"]
        f.create_dataset("data/X", shape=(300_000_000, 2), dtype="<f8", chunks=(4096, 2))
    assert bad.stat().st_size < 200_000
    res = run_cli(["inspect", bad], cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"meanfield: error: {bad}: data/X: shape (300000000, 2) declares 4.8 GB, more than "
        f"the whole file ({bad.stat().st_size / 1e3:.3g} KB) holds; {SEE}"]


# ------------------------------------------------------------------ files written before

def test_a_file_written_before_checksums_still_reads(tiny_run_file, tmp_path, capsys):
    """No Fletcher-32, variable-length string attributes: read as before (its data_hash
    checked), through every reader."""
    _, run = tiny_run_file
    old = old_format(run, tmp_path / "old.h5")
    with h5py.File(old, "r") as f:
        assert not f["data/y"].fletcher32 and f["data/y"].chunks is None
        assert isinstance(f["parameters"].attrs["config_json"], str)        # global heap
    a, b = open_run(run), open_run(old)
    assert b.data_hash == a.data_hash != ""
    for name in a.observables:
        for k in ("step", "time", "value"):
            np.testing.assert_array_equal(a.observables[name][k], b.observables[name][k])
    np.testing.assert_array_equal(a.frame(5), b.frame(5))
    assert b.config_json == a.config_json and b.physics_hash == a.physics_hash
    assert cli.main(["inspect", str(old)]) == 0
    assert cli.main(["analyze", str(old), "-o", str(tmp_path / "rep"), "--no-w2",
                     "--no-references", "--no-figures", "--quiet"]) == 0
    capsys.readouterr()
    # one flipped bit: no checksum to tell, the data_hash does
    _flip(old, "data/y")
    line = one_line(capsys, cli.main(["inspect", str(old)]))
    assert f"{old}: data/X, data/y: the values do not match the stored data_hash" in line


def test_an_interrupted_run_written_before_checksums_resumes(interrupted, tmp_path):
    for name in ("c.toml", "out.h5.ckpt"):
        shutil.copy(interrupted / name, tmp_path / name)
    old_format(interrupted / "out.h5.part", tmp_path / "out.h5.part")
    assert cli.main(["run", str(tmp_path / "c.toml"), "-o", str(tmp_path / "out.h5"),
                     "--resume", "--quiet", "--threads", "1"]) == 0
    done, full = open_run(tmp_path / "out.h5"), open_run(interrupted / "full.h5")
    assert done.complete
    for name in full.observables:
        np.testing.assert_array_equal(done.observables[name]["value"],
                                      full.observables[name]["value"])
    np.testing.assert_array_equal(done.frame(-1), full.frame(-1))
    with h5py.File(tmp_path / "out.h5", "r") as f:          # its layout kept
        assert not f["data/y"].fletcher32


def test_new_files_have_checksums_and_no_global_heap(tiny_run_file):
    _, run = tiny_run_file
    assert b"GCOL" not in run.read_bytes()
    with h5py.File(run, "r") as f:
        found = []
        f.visititems(lambda name, obj: found.append((name, obj.fletcher32, obj.chunks))
                     if isinstance(obj, h5py.Dataset) else None)
        assert found and all(fl and ch for _, fl, ch in found), found
        assert f["parameters"].attrs["config_json"].startswith(b"{")


# ----------------------------------------------------------------- the damaged global heap

@pytest.fixture
def heap_file(tiny_run_file, tmp_path):
    """The tiny run written before fixed-length strings, its global heap damaged."""
    bad = old_format(tiny_run_file[1], tmp_path / "heap.h5")
    damage_global_heap(bad)
    return bad


def test_a_damaged_global_heap_is_refused_in_bounded_time(heap_file, tmp_path):
    """Every reader once spun forever inside libhdf5 on this file, deaf to signals."""
    t0 = time.monotonic()
    res = run_cli(["inspect", heap_file], cwd=tmp_path, timeout=20 + trust.ATTRIBUTE_DEADLINE)
    took = time.monotonic() - t0
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"meanfield: error: {heap_file}: "), lines
    assert "HDF5 did not finish reading this attribute in 10 s" in lines[0]
    assert "global heap" in lines[0] and lines[0].endswith(SEE)
    assert took < trust.ATTRIBUTE_DEADLINE + 15


@pytest.mark.parametrize("command", ["analyze", "resume", "dichotomies"])
def test_a_damaged_global_heap_is_one_line_for_every_reader(heap_file, interrupted, tmp_path,
                                                            capsys, monkeypatch, command):
    monkeypatch.setattr(trust, "ATTRIBUTE_DEADLINE", 2.0)
    if command == "resume":
        for name in ("c.toml", "out.h5.ckpt"):
            shutil.copy(interrupted / name, tmp_path / name)
        part = old_format(interrupted / "out.h5.part", tmp_path / "out.h5.part")
        damage_global_heap(part)
        argv, bad = ["run", str(tmp_path / "c.toml"), "-o", str(tmp_path / "out.h5"),
                     "--resume", "--quiet"], part
    else:
        argv, bad = [command, str(heap_file)], heap_file
        if command == "analyze":
            argv += ["-o", str(tmp_path / "rep"), "--no-figures"]
    t0 = time.monotonic()
    line = one_line(capsys, cli.main(argv))
    assert time.monotonic() - t0 < 10          # the file opened twice waits once
    assert line.startswith(f"meanfield: error: {bad}: ") and "did not finish" in line, line
    assert not (tmp_path / "rep").exists()


def _children_of(pid: int) -> set:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(c) for c in text.split()}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigterm_ends_a_reader_of_a_damaged_heap_and_its_child(heap_file, tmp_path):
    proc = start(["inspect", heap_file], cwd=tmp_path)
    children = set()
    try:
        t0 = time.monotonic()
        while not children and time.monotonic() - t0 < 30 and proc.poll() is None:
            children = _children_of(proc.pid)
            time.sleep(0.05)
        assert children, "no child process checked the attributes"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["meanfield: terminated by SIGTERM"], err
    t0 = time.monotonic()
    while any(os.path.exists(f"/proc/{c}") and
              Path(f"/proc/{c}/stat").read_text().split()[2] != "Z" for c in children) \
            and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    left = [c for c in children if os.path.exists(f"/proc/{c}")
            and Path(f"/proc/{c}/stat").read_text().split()[2] != "Z"]
    assert not left, f"the checking process {left} outlived its parent"


def test_a_stored_config_that_is_not_json_names_the_file_once(tiny_run_file, tmp_path, capsys):
    bad = _copy(tiny_run_file[1], tmp_path)
    with h5py.File(bad, "a") as f:
        set_text(f["parameters"], "config_json", "{not json")
    line = one_line(capsys, cli.main(["inspect", str(bad)]))
    assert line.startswith(f"meanfield: error: {bad}: parameters.config_json: "), line
    assert line.count(str(bad)) == 1, line


@pytest.mark.parametrize("flags, says", [
    (["-o", ""], "-o/--outdir: empty path"),
    (["--halo-ratio", "inf"], "--halo-ratio: must be finite and >= 0"),
])
def test_analyze_refuses_options_that_cannot_mean_what_they_say(tiny_run_file, tmp_path,
                                                                capsys, flags, says):
    run = str(tiny_run_file[1])
    line = one_line(capsys, cli.main(["analyze", run, "--no-references", "--no-figures",
                                      *flags]))
    assert says in line, line
