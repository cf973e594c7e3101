"""A run is bound to its data values, not to its paths; outputs never overwrite inputs.

A resume, and a study's "already done", compare the physics of the config
(``RunConfig.physics_hash``, which leaves the ``[data]`` table out) and the values of the data
(the ``/data/X``, ``/data/y`` stored in the run file, ``data_hash``): an edited data file is
refused (or, in a study, run again), a moved run folder resumes. ``-o`` naming the config or
the data file is refused before any work.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import tiny_toml
from support import h5_items

from meanfield import checkpoint, cli, config, data, runner
from meanfield.errors import InputError, Interrupted
from meanfield.store import open_run

CSV = """x1,x2,y
0.0,1.0,0.5
1.0,0.0,-0.5
1.0,1.0,0.25
-1.0,0.5,0.5
0.5,-1.0,-0.25
"""


def write_run_folder(folder: Path) -> Path:
    """``folder/d.csv`` and ``folder/c.toml`` (the tiny run on it, a relative data path, a
    checkpoint every 60 steps); returns the config's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "d.csv").write_text(CSV)
    cfg = folder / "c.toml"
    cfg.write_text(tiny_toml({"data": {"kind": "file", "path": "d.csv", "target": "y"},
                              "model.n_particles": 32, "output.checkpoint_every": 60}))
    return cfg


def edit_y3(folder: Path, value: str = "0.7") -> None:
    """Set y of the fourth data row (0.5 in :data:`CSV`) in ``folder/d.csv``."""
    p = folder / "d.csv"
    rows = p.read_text().splitlines()
    assert rows[4].startswith("-1.0,0.5,")
    rows[4] = f"-1.0,0.5,{value}"
    p.write_text("\n".join(rows) + "\n")


def interrupt(cfg: Path, out: Path, monkeypatch, k: int = 7) -> None:
    """Run ``cfg`` into ``out`` and stop it at the ``k``-th observation boundary: ``out.part``
    and ``out.ckpt`` stay, as after Ctrl-C."""
    calls = {"n": 0}

    def fake(self):
        calls["n"] += 1
        return calls["n"] >= k
    with monkeypatch.context() as m:
        m.setattr(runner._StopRequest, "__call__", fake)
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg), out, progress=False)
    assert out.with_name(out.name + ".part").exists() and out.with_name(out.name + ".ckpt").exists()


def cli_run(capsys, *argv):
    """``meanfield run ARGV --quiet`` in process: (exit code, stderr)."""
    capsys.readouterr()
    code = cli.main(["run", *map(str, argv), "--quiet"])
    return code, capsys.readouterr().err


@pytest.fixture(autouse=True)
def _one_thread(one_thread, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)


# ----------------------------------------------------------------------------- the hashes

def test_data_hash_against_hand_built_bytes():
    """The documented byte string, built with struct instead of NumPy."""
    X = np.array([[0.0, 1.0], [-2.5, 3e-300]])
    y = np.array([0.5, -0.0])
    raw = b"meanfield-data:2,2;" + struct.pack("<4d", 0.0, 1.0, -2.5, 3e-300) \
        + struct.pack("<2d", 0.5, -0.0)
    assert data.data_hash(X, y) == hashlib.sha256(raw).hexdigest()[:16]
    # the memory order of the same values does not matter, nor big-endian storage
    assert data.data_hash(np.asfortranarray(X), y.astype(">f8")) == data.data_hash(X, y)
    # one bit of one value, a sign of zero, or the shape change it
    assert data.data_hash(X, np.array([0.5, 0.0])) != data.data_hash(X, y)
    assert data.data_hash(X.reshape(1, 4), y) != data.data_hash(X, y)


def test_values_differ_names_the_first_difference():
    X, y = np.zeros((5, 2)), np.array([0.5, -0.5, 0.25, 0.5, -0.25])
    y2 = y.copy()
    y2[3] = 0.7
    assert data.values_differ(X, y, X, y) is None
    assert data.values_differ(X, y2, X, y) == "y[3] 0.5 -> 0.7 (1 of 5 entries of y differ)"
    X2 = X.copy()
    X2[1, 0] = X2[4, 1] = 1.0
    assert data.values_differ(X2, y, X, y) == "X[1, 0] 0.0 -> 1.0 (2 of 10 entries of X differ)"
    assert data.values_differ(X[:4], y[:4], X, y) == "X has shape (4, 2), (5, 2) before"
    assert data.values_differ(X, y * 0.0, X, -0.0 * y) is not None      # bitwise: -0.0 != 0.0


def test_physics_hash_leaves_out_where_the_data_come_from(tmp_path):
    a = write_run_folder(tmp_path / "a")
    b = write_run_folder(tmp_path / "b")
    ca, cb = config.load(a), config.load(b)
    assert ca.data.path != cb.data.path and ca.hash() != cb.hash()
    assert ca.physics_hash() == cb.physics_hash()
    d = ca.as_dict()
    d["dynamics"]["lam"] = 0.07
    assert config.from_dict(d).physics_hash() != ca.physics_hash()
    # output.checkpoint_every is not physics; the rest of [output] is (it changes the file)
    d = ca.as_dict()
    d["output"]["checkpoint_every"] = 7
    assert config.from_dict(d).physics_hash() == ca.physics_hash()
    d["output"]["observe_every"] = 10
    assert config.from_dict(d).physics_hash() != ca.physics_hash()


# ----------------------------------------------------------------------------- case 1: resume on edited data

def test_resume_after_the_data_changed_is_refused(tmp_path, monkeypatch, capsys):
    cfg = write_run_folder(tmp_path)
    out = tmp_path / "r.h5"
    interrupt(cfg, out, monkeypatch)
    part, ckpt = out.with_name("r.h5.part"), out.with_name("r.h5.ckpt")
    before = (part.read_bytes(), ckpt.read_bytes())
    edit_y3(tmp_path)
    code, err = cli_run(capsys, cfg, "-o", out, "--resume")
    assert code == 2
    lines = err.strip().splitlines()
    assert lines == [f"meanfield: error: {tmp_path / 'd.csv'}: data values differ from those "
                     f"stored in {part}: y[3] 0.5 -> 0.7 (1 of 5 entries of y differ); "
                     "resume with the same config and data, or pass --overwrite to start over"]
    assert (part.read_bytes(), ckpt.read_bytes()) == before and not out.exists()
    # with the data as they were, the resume goes through
    edit_y3(tmp_path, "0.5")
    code, err = cli_run(capsys, cfg, "-o", out, "--resume")
    assert code == 0, err
    assert open_run(out).complete


def test_complete_output_on_edited_data(tmp_path, capsys):
    """``--resume`` on a finished run whose data changed since: refused, nothing touched."""
    cfg = write_run_folder(tmp_path)
    out = tmp_path / "r.h5"
    assert cli_run(capsys, cfg, "-o", out)[0] == 0
    st = out.stat().st_mtime_ns
    edit_y3(tmp_path)
    code, err = cli_run(capsys, cfg, "-o", out, "--resume")
    assert code == 2 and "data values differ from those stored in" in err
    assert "y[3] 0.5 -> 0.7" in err and "--overwrite to replace it" in err
    assert out.stat().st_mtime_ns == st
    # the complete part a killed rename leaves: refused as well
    out.rename(out.with_name("r.h5.part"))
    code, err = cli_run(capsys, cfg, "-o", out, "--resume")
    assert code == 2 and "stored in" in err and "r.h5.part" in err


def test_checkpoint_of_other_data_is_refused(tmp_path, monkeypatch, capsys):
    """The checkpoint's data_hash must be that of the data (the run file's values match)."""
    cfg = write_run_folder(tmp_path)
    out = tmp_path / "r.h5"
    interrupt(cfg, out, monkeypatch)
    ckpt = out.with_name("r.h5.ckpt")
    from solvers.langevin import SolverState
    st, meta = checkpoint.load(ckpt, SolverState)
    checkpoint.save(ckpt, st, physics_hash=meta["physics_hash"], config_hash=meta["config_hash"],
                    data_hash="0" * 16)
    code, err = cli_run(capsys, cfg, "-o", out, "--resume")
    assert code == 2 and "r.h5.ckpt: was written on other data" in err


def test_legacy_files_resume_by_their_stored_values(tmp_path, monkeypatch, capsys):
    """Run files and checkpoints written before ``data_hash`` (their physics hash covered the
    data path) resume when config and stored data match, and are refused when not."""
    cfg = write_run_folder(tmp_path)
    out, ref = tmp_path / "r.h5", tmp_path / "ref.h5"
    runner.run(config.load(cfg), ref, progress=False)
    interrupt(cfg, out, monkeypatch)
    part, ckpt = out.with_name("r.h5.part"), out.with_name("r.h5.ckpt")
    legacy = "0123456789ab"     # what the old formula stored (data path included)
    with h5py.File(part, "r+") as f:
        del f["parameters"].attrs["data_hash"]
        f["parameters"].attrs["physics_hash"] = legacy
    from solvers.langevin import SolverState
    st, meta = checkpoint.load(ckpt, SolverState)
    checkpoint.save(ckpt, st, physics_hash=legacy, config_hash=meta["config_hash"])
    saved = (part.read_bytes(), ckpt.read_bytes())
    edit_y3(tmp_path)
    code, err = cli_run(capsys, cfg, "-o", out, "--resume")
    assert code == 2 and "y[3] 0.5 -> 0.7" in err
    edit_y3(tmp_path, "0.5")
    lam = tmp_path / "lam.toml"
    lam.write_text(cfg.read_text().replace("lam = 0.05", "lam = 0.07"))
    code, err = cli_run(capsys, lam, "-o", out, "--resume")
    assert code == 2 and "physics hash" in err and "dynamics.lam 0.05 -> 0.07" in err
    assert (part.read_bytes(), ckpt.read_bytes()) == saved
    assert cli_run(capsys, cfg, "-o", out, "--resume")[0] == 0
    a, b = h5_items(ref), h5_items(out)
    differ = {k for k in a if a[k] != b.get(k)}
    assert differ == {"parameters/@"}          # the legacy attributes, nothing else
    assert {k for k in a["parameters/@"] if a["parameters/@"][k] != b["parameters/@"].get(k)} \
        == {"data_hash", "physics_hash"}


# ----------------------------------------------------------------------------- case 3: moved run folder

def test_moved_run_folder_resumes_bitwise(tmp_path, monkeypatch, capsys):
    cfg = write_run_folder(tmp_path / "a")
    runner.run(config.load(cfg), tmp_path / "a" / "ref.h5", progress=False)
    interrupt(cfg, tmp_path / "a" / "r.h5", monkeypatch)
    (tmp_path / "a").rename(tmp_path / "b")
    monkeypatch.chdir(tmp_path / "b")
    code, err = cli_run(capsys, "c.toml", "-o", "r.h5", "--resume")
    assert code == 0, err
    assert "resuming r.h5.part from step" in err
    a, b = h5_items(tmp_path / "b" / "ref.h5"), h5_items(tmp_path / "b" / "r.h5")
    assert sorted(a) == sorted(b) and not [k for k in a if a[k] != b[k]]


def test_other_data_file_with_the_same_values_resumes(tmp_path, monkeypatch, capsys):
    """Only values count: the same numbers in another file (other column order, comments)."""
    cfg = write_run_folder(tmp_path)
    interrupt(cfg, tmp_path / "r.h5", monkeypatch)
    (tmp_path / "e.csv").write_text("# the same points\ny,x1,x2\n" + "".join(
        f"{r.split(',')[2]},{r.split(',')[0]},{r.split(',')[1]}\n"
        for r in CSV.splitlines()[1:]))
    moved = tmp_path / "e.toml"
    moved.write_text(cfg.read_text().replace('"d.csv"', '"e.csv"'))
    assert cli_run(capsys, moved, "-o", tmp_path / "r.h5", "--resume")[0] == 0


# ----------------------------------------------------------------------------- case 2: sweeps

@pytest.mark.slow
def test_sweep_reruns_exactly_the_jobs_whose_data_changed(tmp_path):
    from meanfield.sweep import Study
    write_run_folder(tmp_path)
    shutil.copy(tmp_path / "d.csv", tmp_path / "e.csv")
    (tmp_path / "s.toml").write_text(
        'base = "c.toml"\n[sweep]\n"dynamics.seed" = [1, 2]\n'
        f'"data.path" = ["{tmp_path / "d.csv"}", "{tmp_path / "e.csv"}"]\n')
    study = Study.from_file(tmp_path / "s.toml", tmp_path / "st")
    first = study.run(serial=True, progress=False)
    assert first.ok and len(first.ran) == 4 and not first.rerun
    on_d = {j.id for j in study.jobs if j.config.data.path.endswith("d.csv")}
    mtimes = {j.id: study.run_file(j).stat().st_mtime_ns for j in study.jobs}
    edit_y3(tmp_path)
    second = Study.from_file(tmp_path / "s.toml", tmp_path / "st").run(serial=True,
                                                                       progress=False)
    assert second.ok and set(second.ran) == on_d == set(second.rerun)
    assert set(second.skipped) == {j.id for j in study.jobs} - on_d
    text = str(second)
    assert "2 run now, 2 already done" in text
    assert "2 of them run again: their inputs changed" in text and "y[3] 0.5 -> 0.7" in text
    for j in study.jobs:
        changed = study.run_file(j).stat().st_mtime_ns != mtimes[j.id]
        assert changed == (j.id in on_d)
        assert open_run(study.run_file(j)).y[3] == (0.7 if j.id in on_d else 0.5)
    third = Study.from_file(tmp_path / "s.toml", tmp_path / "st").run(serial=True,
                                                                      progress=False)
    assert third.ok and not third.ran and len(third.skipped) == 4 and not third.rerun


def test_sweep_job_interrupted_then_data_changed_starts_over(tmp_path, monkeypatch):
    from meanfield.sweep.job import run_job
    cfg = write_run_folder(tmp_path)
    out = tmp_path / "r.h5"
    interrupt(cfg, out, monkeypatch)
    edit_y3(tmp_path)
    res = run_job(config.load(cfg).canonical_json(), str(out), job_id="j")
    assert res["status"] == "done" and not res["skipped"], res
    assert "y[3] 0.5 -> 0.7" in res["rerun"]
    assert open_run(out).complete and open_run(out).y[3] == 0.7


# ----------------------------------------------------------------------------- case 4: outputs never overwrite inputs

@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"]])
@pytest.mark.parametrize("output", ["d.csv", "c.toml", "link-to-d.csv", "hard-link-to-c.toml",
                                    "linked-dir/d.csv", "conf.ckpt"])
def test_output_naming_an_input_is_refused(tmp_path, capsys, output, flags):
    cfg = write_run_folder(tmp_path)
    os.symlink(tmp_path / "d.csv", tmp_path / "link-to-d.csv")
    os.link(tmp_path / "c.toml", tmp_path / "hard-link-to-c.toml")
    (tmp_path / "sub").mkdir()
    os.symlink(tmp_path, tmp_path / "sub" / "linked-dir")
    if output == "conf.ckpt":        # -o conf would write conf.ckpt, the config
        cfg = cfg.rename(tmp_path / "conf.ckpt")
    out = tmp_path / output.replace(".ckpt", "")
    if output.startswith("linked-dir"):
        out = tmp_path / "sub" / output
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    code, err = cli_run(capsys, cfg, "-o", out, *flags)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "a run never writes over its inputs" in lines[0], err
    is_data = output.endswith("d.csv")
    assert ("is the data file" in lines[0] or "which is the data file" in lines[0]) == is_data
    assert ("the config of this run" in lines[0]) == (not is_data)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert after == before


def test_api_refuses_the_data_file_as_output(tmp_path):
    cfg = write_run_folder(tmp_path)
    with pytest.raises(InputError, match="is the data file"):
        runner.run(config.load(cfg), tmp_path / "d.csv", overwrite=True, progress=False)
    assert (tmp_path / "d.csv").read_text() == CSV


# ----------------------------------------------------------------------------- symlinked outputs

def test_overwrite_through_a_symlink_keeps_the_link(tmp_path, capsys):
    cfg = write_run_folder(tmp_path)
    (tmp_path / "runs").mkdir()
    assert cli_run(capsys, cfg, "-o", tmp_path / "runs" / "t.h5")[0] == 0
    os.symlink("runs/t.h5", tmp_path / "link.h5")
    code, err = cli_run(capsys, cfg, "-o", "link.h5")
    assert code == 2 and "output exists" in err
    capsys.readouterr()
    assert cli.main(["run", str(cfg), "-o", "link.h5", "--overwrite", "--quiet"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed == str(tmp_path / "runs" / "t.h5")
    assert os.readlink(tmp_path / "link.h5") == "runs/t.h5"
    assert open_run(tmp_path / "link.h5").complete
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["t.h5"]


def test_dangling_symlink_needs_overwrite(tmp_path, capsys):
    cfg = write_run_folder(tmp_path)
    os.symlink("missing.h5", tmp_path / "dangling.h5")
    code, err = cli_run(capsys, cfg, "-o", "dangling.h5")
    assert code == 2
    assert err.strip().splitlines() == [
        f"meanfield: error: dangling.h5: -o: is a symbolic link to {tmp_path / 'missing.h5'}, "
        "which does not exist; pass --overwrite to write the run there (the link is kept), or "
        "remove the link"]
    assert os.readlink(tmp_path / "dangling.h5") == "missing.h5"
    assert not (tmp_path / "missing.h5").exists()
    assert cli_run(capsys, cfg, "-o", "dangling.h5", "--overwrite")[0] == 0
    assert os.readlink(tmp_path / "dangling.h5") == "missing.h5"
    assert open_run(tmp_path / "missing.h5").complete


# ----------------------------------------------------------------------------- checkpoint write failure

@pytest.mark.parametrize("earlier", [False, True])
def test_checkpoint_write_failure_says_whether_one_is_kept(tmp_path, monkeypatch, earlier):
    cfg = write_run_folder(tmp_path)
    real = checkpoint.save
    calls = {"n": 0}

    def failing(path, *a, **kw):
        calls["n"] += 1
        if calls["n"] > int(earlier):
            raise OSError(28, "No space left on device")
        return real(path, *a, **kw)
    monkeypatch.setattr(checkpoint, "save", failing)
    with pytest.raises(InputError) as info:
        runner.run(config.load(cfg), tmp_path / "r.h5", progress=False)
    line = info.value.line()
    assert line.startswith(f"{tmp_path / 'r.h5.ckpt'}: cannot write (No space left on device)")
    if earlier:
        assert line.endswith("; the previous checkpoint is kept")
        assert (tmp_path / "r.h5.ckpt").exists()
    else:
        assert "previous checkpoint" not in line and "no earlier checkpoint" in line
        assert not (tmp_path / "r.h5.ckpt").exists()


def test_run_mismatch_is_bad_input():
    from meanfield.errors import RunMismatch
    assert issubclass(RunMismatch, InputError)


# ----------------------------------------------------------------------------- analyze -o

def test_report_folder_that_is_or_holds_the_run_is_refused(tmp_path, capsys):
    cfg = write_run_folder(tmp_path / "runs")
    run = runner.run(config.load(cfg), tmp_path / "runs" / "r.h5", progress=False)
    os.symlink(tmp_path / "runs", tmp_path / "link")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "runs").iterdir())
    for outdir, what in ((run, "is"), (tmp_path / "runs", "holds"), (tmp_path, "holds"),
                         (tmp_path / "link", "holds")):
        capsys.readouterr()
        assert cli.main(["analyze", str(run), "-o", str(outdir), "--no-figures"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"meanfield: error: {outdir}: -o: {what} the input {run} (the report "
                       "folder is replaced as a whole); choose another folder"]
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "runs").iterdir()) == \
        before
