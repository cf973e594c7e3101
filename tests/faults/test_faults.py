"""Failure classes reported against the libraries meanfield stands on (HDF5, numba, Dask,
matplotlib, LP/QP solvers), one test per class: every output has one owner, every failure is
one line, and no answer is silently wrong.

Most commands run in-process through ``meanfield.cli.main(argv)``; the few that need another
process (two owners, a numba thread pool fixed at start, a script re-imported by spawned
workers, an environment read at import) use subprocesses.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from meanfield import cli

REPO = Path(__file__).resolve().parents[2]

from support import TINY, checksums, damage_global_heap, old_format, one_line


def run_cli(*argv, env=None, timeout=300, cwd=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "meanfield", *map(str, argv)], env=e,
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


# ------------------------------------------------------------------ 1. one owner per output

def test_an_owned_run_output_is_refused_before_any_work(tiny_run_file, tmp_path, capsys):
    """While another process owns ``s.h5`` (its lock), a second run exits 2 with one line and
    creates nothing: no .part, no .ckpt, no output."""
    cfg, _ = tiny_run_file
    out = tmp_path / "s.h5"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(tmp_path / '.s.h5.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nos.write(fd, str(os.getpid()).encode())\n"
         "print('held', flush=True)\ntime.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        line = one_line(capsys, cli.main(["run", str(cfg), "-o", str(out), "--quiet"]))
    finally:
        holder.kill()
        holder.wait()
    assert "in use by another meanfield process" in line and str(holder.pid) in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.h5.lock"]
    # once the owner is gone the output is free again, and the stale lock file is no obstacle
    assert cli.main(["run", str(cfg), "-o", str(out), "--quiet", "--threads", "1"]) == 0
    assert out.read_bytes() == tiny_run_file[1].read_bytes()
    assert not (tmp_path / ".s.h5.lock").exists()


def test_an_owned_report_folder_is_refused(tiny_run_file, tmp_path, capsys):
    _, run = tiny_run_file
    rep = tmp_path / "rep"
    fd = os.open(tmp_path / ".rep.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        line = one_line(capsys, cli.main(["analyze", str(run), "-o", str(rep), "--no-w2",
                                          "--no-references", "--no-figures"]))
    finally:
        os.close(fd)
    assert "in use" in line and not rep.exists()


@pytest.mark.slow       # 13 s: pairs of concurrent runs (out of the fast tier)
def test_pairs_of_runs_on_one_output(tiny_run_file, tmp_path):
    """Two ``meanfield run`` on one output at random offsets (``MEANFIELD_PAIRS`` pairs, 5 by
    default): never exit 0 with an incomplete or wrong file; the winner's file is bitwise the
    single run; the loser exits 2 with one line."""
    cfg, single = tiny_run_file
    pairs = int(os.environ.get("MEANFIELD_PAIRS", "5"))
    rng = np.random.default_rng(int(os.environ.get("MEANFIELD_PAIRS_SEED", "17")))
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    ref = single.read_bytes()
    outcomes, losers = [], []
    for k in range(pairs):
        out = tmp_path / f"s{k}.h5"
        cmd = [sys.executable, "-m", "meanfield", "run", str(cfg), "-o", str(out), "--quiet"]
        a = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        import time
        time.sleep(float(rng.uniform(0, 1.5)))
        b = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        res = [(p.wait(timeout=300), p.stderr.read()) for p in (a, b)]
        codes = sorted(c for c, _ in res)
        outcomes.append(tuple(codes))
        assert codes in ([0, 2], [0, 0]), res
        assert "Traceback" not in "".join(e for _, e in res), res
        for code, err in res:
            if code == 2:
                assert len(err.strip().splitlines()) == 1, err
                losers.append("in use" if "in use" in err else "exists" if "exists" in err
                              else err.strip())
        assert out.read_bytes() == ref, f"pair {k}: the finished file differs from a single run"
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f"s{k}.")) == \
            [f"s{k}.h5"]
    print(f"{pairs} pairs: outcomes {sorted(set(outcomes))}, "
          f"{sum(o == (0, 2) for o in outcomes)} with a refused loser; losers refused as "
          f"{ {m: losers.count(m) for m in set(losers)} }")


# ------------------------------------------------------------ 2. damaged metadata, readers

@pytest.mark.parametrize("signature", [b"HEAP", b"FRHP", b"OHDR", b"GCOL"])
@pytest.mark.parametrize("command", ["inspect", "analyze", "dichotomies"])
def test_a_damaged_heap_is_one_line_for_every_reader(tiny_run_file, tmp_path, capsys, command,
                                                     signature, monkeypatch):
    """A damaged name heap (the local heap ``HEAP`` of the old file format, the fractal heap
    ``FRHP`` of the SWMR format), object header, or global heap (``GCOL``, of the
    variable-length strings of files written before fixed-length ones, on which HDF5 loops
    forever: its attributes are read in a child process with a deadline first): one line
    naming the file, exit 2."""
    from meanfield.store import trust
    _, run = tiny_run_file
    bad = tmp_path / "heap.h5"
    if signature == b"GCOL":
        monkeypatch.setattr(trust, "ATTRIBUTE_DEADLINE", 2.0)
        old_format(run, bad)
        damage_global_heap(bad)
    else:
        data = bytearray(run.read_bytes())
        i = data.find(signature)
        if i < 0:
            assert signature == b"HEAP", f"{signature!r} not in a run file"
            pytest.skip("run files are written in the SWMR format (no local heap)")
        data[i:i + 4] = b"XXXX"
        bad.write_bytes(bytes(data))
    argv = [command, str(bad)] + (["-o", str(tmp_path / "rep")] if command == "analyze" else [])
    line = one_line(capsys, cli.main(argv))
    assert "heap.h5" in line
    assert "damaged" in line or "not a meanfield run file" in line
    assert not (tmp_path / "rep").exists()


# ------------------------------------------------------- 3. writes that fail half way

@pytest.fixture
def file_size_limit():
    """Set the soft file-size limit (bytes) for the block; Python ignores SIGXFSZ, so a write
    beyond it fails with EFBIG like under ``ulimit -f``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def set_limit(nbytes):
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, hard))
    yield set_limit
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


@pytest.mark.slow
def test_a_report_is_written_complete_or_not_at_all(tiny_run_file, tmp_path, capsys,
                                                     file_size_limit):
    _, run = tiny_run_file
    rep = tmp_path / "rep"
    args = ["analyze", str(run), "--no-w2", "--no-references"]
    assert cli.main(args + ["-o", str(rep)]) == 0          # also warms the numba cache
    capsys.readouterr()
    before = checksums(rep)
    assert {"report.json", "report.md", "predictor.png"} <= set(before)
    file_size_limit(20 * 1024)
    try:
        line = one_line(capsys, cli.main(args + ["-o", str(rep)]))
        line2 = one_line(capsys, cli.main(args + ["-o", str(tmp_path / "new")]))
    finally:
        file_size_limit(resource.RLIM_INFINITY)
    for ln in (line, line2):
        assert "cannot write (File too large)" in ln and "nothing written" in ln
    assert str(rep / "") in line and str(tmp_path / "new" / "") in line2     # the file is named
    assert checksums(rep) == before
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rep"]


# ---------------------------------------------------- 4. a failing numba cache is named

def test_a_failing_numba_cache_is_named_not_the_run_file(tiny_run_file, tmp_path, capsys,
                                                         monkeypatch, file_size_limit):
    import numba

    import meanfield.runner.loop as runner_module  # the loop calls simulate
    cfg, _ = tiny_run_file
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(cache))
    mod = tmp_path / "kernelmod.py"
    mod.write_text(textwrap.dedent("""\
        import numba, numpy as np
        @numba.njit(cache=True)
        def k(x):
            s = 0.0
            for i in range(x.shape[0]):
                s += np.sin(x[i]) * np.cos(x[i]) + np.exp(x[i]) + np.tanh(x[i])
            return s
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    kernelmod = importlib.import_module("kernelmod")

    def simulate(*a, **kw):             # the solver compiling a kernel on first use
        file_size_limit(2048)
        try:
            kernelmod.k(np.ones(3))
        finally:
            file_size_limit(resource.RLIM_INFINITY)
    monkeypatch.setattr(runner_module, "simulate", simulate)
    out = tmp_path / "us.h5"
    line = one_line(capsys, cli.main(["run", str(cfg), "-o", str(out), "--quiet"]))
    assert "numba cache file " + str(cache) in line and "File too large" in line
    assert "us.h5" not in line and "NUMBA_CACHE_DIR" in line


# ------------------------------------------------------------- 5. read-only destinations

def test_sweep_into_an_unwritable_place_is_refused_before_any_job(tmp_path, capsys):
    study = tmp_path / "study.toml"
    study.write_text(TINY + '[sweep]\n"dynamics.seed" = [0, 1]\n')
    line = one_line(capsys, cli.main(["sweep", str(study), "-o", "/sys/st", "--serial",
                                      "--quiet"]))
    assert "/sys/st" in line and "cannot create" in line


def test_analyze_next_to_a_run_in_a_read_only_folder_is_refused_before_work(
        tiny_run_file, tmp_path, capsys, monkeypatch):
    """The default report folder of ``ro/run.h5`` is ``ro/run-report``; a read-only ``ro``
    (simulated for every user, root included: creating anything in it fails with EROFS) is
    refused before the run is analysed."""
    import errno

    import meanfield.report
    _, run = tiny_run_file
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "run.h5").write_bytes(run.read_bytes())
    real_open, real_mkdir = os.open, os.mkdir

    def refuse(path, *a, **kw):
        if str(path).startswith(str(ro)) and (a and a[0] & (os.O_CREAT | os.O_WRONLY)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, *a, **kw)

    def no_mkdir(path, *a, **kw):
        if str(path).startswith(str(ro)):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_mkdir(path, *a, **kw)

    def analysed(*a, **kw):
        raise AssertionError("the run was analysed although its report cannot be written")
    monkeypatch.setattr(os, "open", refuse)
    monkeypatch.setattr(os, "mkdir", no_mkdir)
    monkeypatch.setattr(meanfield.report, "analyze_run", analysed)
    line = one_line(capsys, cli.main(["analyze", str(ro / "run.h5"), "--no-w2"]))
    assert "run-report" in line and "Read-only file system" in line


# ------------------------------------------------------------ 6. values that overflow

@pytest.mark.parametrize("table,key,value,bound", [
    ("dynamics", "steps_per_tau", 9223372036854775807, "2147483647"),
    ("model", "n_particles", 10**12, "100000000"),
    ("dynamics", "lam", 1e300, "1e+15"),
    ("model", "init_scale", 1e200, "1e+15"),
    ("output", "observe_every", 2**40, "2147483647"),
])
def test_out_of_range_values_are_refused_naming_the_bound(tmp_path, capsys, table, key, value,
                                                          bound):
    text = TINY.replace(f"[{table}]\n", f"[{table}]\n{key} = {value!r}\n", 1)
    lines = text.splitlines()
    seen, keep = set(), []
    for ln in lines:                    # the inserted key wins over TINY's own
        k = ln.split("=")[0].strip()
        if k == key and k in seen:
            continue
        seen.add(k)
        keep.append(ln)
    cfg = tmp_path / "big.toml"
    cfg.write_text("\n".join(keep) + "\n")
    line = one_line(capsys, cli.main(["run", str(cfg), "-o", str(tmp_path / "b.h5")]))
    assert f"{table}.{key}" in line and bound in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.toml"]


def test_grid_size_is_checked_without_forming_the_power(tmp_path, capsys):
    cfg = tmp_path / "g.toml"
    cfg.write_text('[data]\nkind = "grid"\nd = 100000\npoints_per_axis = 1000000\n')
    line = one_line(capsys, cli.main(["dichotomies", str(cfg)]))
    assert "points_per_axis" in line


# ---------------------------------------------------------------- 7. extreme magnitudes

def test_dichotomies_is_right_whatever_the_scale_of_each_column(tmp_path, capsys):
    """P is invariant under an invertible affine map of the inputs: scaling each column by
    10^k (k in -15..15) and shifting it must give the exact count of the unscaled points."""
    from analysis.dichotomies import count_dichotomies
    rng = np.random.default_rng(5)
    X = rng.standard_normal((9, 3))
    P = count_dichotomies(X, exact=True).P
    for trial in range(6):
        scale = 10.0 ** rng.integers(-15, 16, size=3)
        shift = rng.choice([0.0, 1.0, -1e3]) * scale * rng.integers(1, 50, size=3)
        Xs = X * scale + shift
        path = tmp_path / f"x{trial}.csv"
        np.savetxt(path, np.c_[Xs, np.ones(9)], delimiter=",", fmt="%.17g")
        code = cli.main(["dichotomies", str(path), "--json"])
        out = capsys.readouterr()
        assert code in (0, 2) and "Traceback" not in out.err
        if code == 0:
            doc = json.loads(out.out)
            assert doc["P"] == P, (np.log10(scale), doc)
            assert doc["tol_range"] is not None            # the answer names its tolerance


@pytest.mark.slow       # 29 s: references on extreme data, one after another (out of the fast tier)
def test_references_on_extreme_data_refuse_in_one_line(tmp_path, capsys):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((6, 2)) * np.array([1e15, 1e-15])
    y = rng.standard_normal(6) * 1e15
    np.savetxt(tmp_path / "ext.csv", np.c_[X, y], delimiter=",", fmt="%.17g")
    cfg = tmp_path / "ext.toml"
    cfg.write_text('[data]\nkind = "file"\npath = "ext.csv"\n')
    for kind in ("convex", "gibbs"):
        code = cli.main(["reference", kind, str(cfg)])
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if code != 0:
            lines = [ln for ln in err.strip().splitlines() if ln.startswith("meanfield")]
            assert len(lines) == 1 and "rescale the data" in lines[0], err


# ------------------------------------------------------------ 8. highdim, unconverged GD

def test_highdim_with_no_converged_trial_is_an_error(tmp_path, capsys):
    code = cli.main(["highdim", "--n", "20", "--d", "200,400", "--trials", "2", "--c", "0.002",
                     "--max-steps", "3000", "-o", str(tmp_path), "--quiet"])
    line = one_line(capsys, code, want=1)
    assert "converged in no trial" in line
    assert list(tmp_path.iterdir()) == []


def test_highdim_fits_leave_unconverged_cells_out_and_flag_them():
    from meanfield.highdim.experiment import StudyParams, summarize
    p = StudyParams(neurons=1, ns=(20,), ds=(200, 400, 800), trials=3, c=0.5)
    rng = np.random.default_rng(0)
    cells = []
    for d, conv in ((200, [1, 1, 1]), (400, [1, 0, 1]), (800, [0, 0, 0])):
        gap = 3.0 * d ** -0.5 * (1 + 0.01 * rng.standard_normal(3))
        gap[np.asarray(conv) == 0] = 1e3                 # an unconverged GD: far off
        cells.append({"n": 20, "d": d, "eta": 0.1, "trace": float(d), "gap": gap,
                      "rel_gap": gap / 3, "wstar_norm": np.full(3, 3.0),
                      "frozen": np.ones((3, 1), bool), "last_change": np.ones(3, int),
                      "fit_residual_pos": np.zeros(3), "fit_residual_neg": np.zeros(3),
                      "unfit_pos": np.zeros(3), "closed_form_residual": np.zeros(3),
                      "qp_kkt": np.zeros(3), "qp_interpolation": np.zeros(3),
                      "converged": np.asarray(conv), "n_steps": np.full(3, 10)})
    s = summarize(p, cells)
    assert [r["in_fit"] for r in s["cells"]] == [True, True, False]
    assert [r["converged_trials"] for r in s["cells"]] == [3, 2, 0]
    assert s["converged_cells"] == 2 and s["excluded_cells"] == [{"n": 20, "d": 800}]
    assert s["cells"][1]["gap"]["mean"] < 1                       # the 1e3 trial is left out
    assert s["slopes"]["gap"]["d"]["slope"] == pytest.approx(-0.5, abs=0.05)


# ------------------------------------------------------------ 9. sweep worker thread limits

@pytest.mark.slow
def test_a_job_asking_more_threads_than_its_worker_allows_is_capped(tiny_run_file, tmp_path):
    from meanfield import config
    cfg, _ = tiny_run_file
    job = config.load(cfg).canonical_json()
    code = ("import json, sys\nfrom meanfield.sweep.job import run_job\n"
            "r = run_job(sys.argv[1], sys.argv[2], job_id='j', threads=2)\n"
            "print(json.dumps({k: r[k] for k in ('status', 'error', 'threads', 'note')"
            " if k in r}))")
    out = tmp_path / "j.h5"
    proc = subprocess.run([sys.executable, "-c", code, job, str(out)], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, NUMBA_NUM_THREADS="1"))
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["status"] == "done", res
    assert res["threads"] == 1 and "NUMBA_NUM_THREADS" in res["note"] and "allows 1" in res["note"]
    assert out.exists()


def test_the_retry_hint_only_when_a_retry_can_succeed():
    from meanfield.sweep.execute import Summary
    s = Summary(directory=Path("st"), n_jobs=2, failed={"a": "ConfigError: x"}, permanent={"a"})
    assert "rerun the same command" not in str(s) and "fails the same way" in str(s)
    s.failed["b"] = "KilledWorker: a worker died"
    assert "rerun the same command" in str(s)


# ---------------------------------------------------------- 10. a script without main guard

@pytest.mark.slow
def test_a_study_started_at_the_top_level_of_a_script_is_refused_in_one_line(tmp_path):
    study = tmp_path / "study.toml"
    study.write_text(TINY + '[sweep]\n"dynamics.seed" = [0, 1]\n')
    script = tmp_path / "go.py"
    script.write_text("from meanfield.sweep import Study\n"
                      f"study = Study.from_file({str(study)!r}, {str(tmp_path / 'st')!r})\n"
                      "study.run(workers=2)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert proc.returncode != 0
    msgs = [ln for ln in proc.stderr.splitlines() if 'if __name__ == "__main__":' in ln]
    assert len(msgs) == 1 and "go.py" in msgs[0] and "line 3" in msgs[0], proc.stderr
    assert "another sweep" not in proc.stderr
    assert len(proc.stderr.splitlines()) < 15, proc.stderr
    guarded = tmp_path / "ok.py"
    guarded.write_text("from meanfield.sweep.execute import unguarded_call_line\n"
                       "def main():\n    return unguarded_call_line()\n"
                       "if __name__ == '__main__':\n    print(main())\n")
    proc = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))
    assert proc.stdout.strip() == "None", proc.stderr


# ---------------------------------------------------------------------- 11. smaller items

def test_csv_with_byte_order_mark_and_no_header(tmp_path, capsys):
    plain, bom = tmp_path / "a.csv", tmp_path / "b.csv"
    text = "0.1,0.2,1\n0.5,-0.3,-1\n0.9,0.4,1\n"
    plain.write_text(text)
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert cli.main(["dichotomies", str(plain), "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert cli.main(["dichotomies", str(bom), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == a and a["n"] == 3


def test_a_non_zip_npz_is_not_called_pickled(tmp_path, capsys):
    p = tmp_path / "x.npz"
    p.write_bytes(b"hello, not an archive\n" * 4)
    line = one_line(capsys, cli.main(["dichotomies", str(p)]))
    assert "not a NumPy .npz archive" in line and "pickle" not in line


def test_nan_in_csv_is_named_by_its_line(tmp_path, capsys):
    p = tmp_path / "n.csv"
    p.write_text("# comment\nx,y\n0.1,1\n0.2,2\nnan,3\n")
    line = one_line(capsys, cli.main(["dichotomies", str(p), "--target", "y"]))
    assert "line 5" in line


def test_resume_on_an_empty_part_changes_nothing(tiny_run_file, tmp_path, capsys):
    cfg, _ = tiny_run_file
    out = tmp_path / "z.h5"
    part = tmp_path / "z.h5.part"
    part.write_bytes(b"")
    before = part.stat().st_mtime_ns
    line = one_line(capsys, cli.main(["run", str(cfg), "-o", str(out), "--resume", "--quiet"]))
    assert "z.h5.part" in line and "--overwrite" in line
    assert part.read_bytes() == b"" and part.stat().st_mtime_ns == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["z.h5.part"]


def test_resume_on_a_finished_run_does_not_claim_to_write_it(tiny_run_file, capsys):
    cfg, run = tiny_run_file
    before = run.stat().st_mtime_ns
    assert cli.main(["run", str(cfg), "-o", str(run), "--resume", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "already complete" in err and "wrote" not in err
    assert run.stat().st_mtime_ns == before


def test_dichotomies_of_a_part_file_and_the_accepted_types(tiny_run_file, tmp_path, capsys):
    _, run = tiny_run_file
    part = tmp_path / "r.h5.part"
    part.write_bytes(run.read_bytes())
    assert cli.main(["dichotomies", str(part), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n"] == 5
    other = tmp_path / "r.dat"
    other.write_text("1,2\n")
    line = one_line(capsys, cli.main(["dichotomies", str(other)]))
    for ext in (".csv", ".npy", ".npz", ".toml", ".h5"):
        assert ext in line


@pytest.mark.slow
def test_an_invalid_mplbackend_does_not_stop_the_figures(tiny_run_file, tmp_path):
    _, run = tiny_run_file
    proc = run_cli("analyze", run, "-o", tmp_path / "rep", "--no-w2", "--no-references",
                   env={"MPLBACKEND": "nonsense"})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tmp_path / "rep" / "predictor.png").stat().st_size > 0


def test_ctrl_c_on_a_sweep_counts_jobs_whose_files_are_complete(tmp_path, monkeypatch):
    """A job that finished its run file just as the driver was interrupted is ``done`` in the
    manifest, not ``pending``."""
    from meanfield.sweep import Study, execute
    from meanfield.sweep import manifest as man
    study_file = tmp_path / "study.toml"
    study_file.write_text(TINY + '[sweep]\n"dynamics.seed" = [0, 1]\n')
    study = Study.from_file(study_file, tmp_path / "st")
    real = execute.run_job

    def then_ctrl_c(*a, **kw):
        real(*a, **kw)
        raise KeyboardInterrupt
    monkeypatch.setattr(execute, "run_job", then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        study.run(serial=True, threads=1, progress=False)
    doc = man.read(study.directory)
    assert [j["status"] for j in doc["jobs"]] == ["done", "pending"]
    assert study.status()["done"] == 1
