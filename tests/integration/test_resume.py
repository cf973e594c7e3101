"""Interrupt, kill and resume ``meanfield run``: the finished run file must be bitwise identical
(every dataset and attribute) to an uninterrupted run of the same config.

The in-process tests stop the solver at chosen observation boundaries; the slow tests send
SIGTERM/SIGINT and SIGKILL to real ``python -m meanfield run`` processes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_toml
from support import (
    KILL,
    assert_identical,
    leftovers,
    run_cli,
    start,
    stop_after,
    wait_for,
)

from meanfield import cli, config, runner
from meanfield.errors import InputError, Interrupted
from meanfield.store import open_run

REPO = Path(__file__).resolve().parents[2]


def tiny_text(ckpt, changes=None):
    """The tiny config of ``conftest`` with checkpoints every ``ckpt`` steps."""
    return tiny_toml({"output.checkpoint_every": ckpt, **(changes or {})})

# 16 observation boundaries per temperature (15 multiples of 20, and the snapshot at 250)
BOUNDARIES = 32

# For the subprocess tests: long enough to be killed in the middle of writing.


# ----------------------------------------------------------------------------- helpers


def assert_prefix_of(ref, partial):
    """The committed rows of a partial run file equal the first rows of the finished run."""
    r, p = open_run(ref), open_run(partial)
    assert p.config == r.config and p.n_frames <= r.n_frames
    np.testing.assert_array_equal(p.frame_step, r.frame_step[:p.n_frames])
    for k in range(p.n_frames):
        assert p.frame(k).tobytes() == r.frame(k).tobytes()
    for name, obs in p.observables.items():
        m = len(obs["step"])
        for key in ("step", "time", "value"):
            assert obs[key].tobytes() == r.observables[name][key][:m].tobytes(), (name, key)
    return p


@pytest.fixture
def one_thread():
    import numba
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(old)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny config and its uninterrupted run file."""
    import numba
    d = tmp_path_factory.mktemp("tiny")
    cfg_path = d / "tiny.toml"
    cfg_path.write_text(tiny_text(60))
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        ref = runner.run(config.load(cfg_path), d / "ref.h5", progress=False)
    finally:
        numba.set_num_threads(old)
    return cfg_path, ref


# ----------------------------------------------------------------------------- in process

@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("k", [1, 7, 16, 17, 31])
def test_stop_then_resume_is_bitwise_identical(tiny, tmp_path, monkeypatch, k):
    cfg_path, ref = tiny
    out = tmp_path / "run.h5"
    with monkeypatch.context() as m:
        stop_after(m, k)
        with pytest.raises(Interrupted) as info:
            runner.run(config.load(cfg_path), out, progress=False)
    assert "--resume" in str(info.value)
    assert leftovers(out) == ["run.h5.ckpt", "run.h5.part"] and not out.exists()
    assert_prefix_of(ref, out.with_name("run.h5.part"))
    runner.run(config.load(cfg_path), out, resume=True, progress=False)
    assert leftovers(out) == []
    assert assert_identical(ref, out) > 40


@pytest.mark.usefixtures("one_thread")
def test_two_interruptions_and_other_checkpoint_interval(tiny, tmp_path, monkeypatch):
    """checkpoint_every is not physics: a resume may change it and still match."""
    cfg_path, ref = tiny
    other = tmp_path / "other.toml"
    other.write_text(tiny_text(20))
    out = tmp_path / "run.h5"
    with monkeypatch.context() as m:
        stop_after(m, 5)
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg_path), out, progress=False)
    with monkeypatch.context() as m:
        stop_after(m, 9)
        with pytest.raises(Interrupted):
            runner.run(config.load(other), out, resume=True, progress=False)
    runner.run(config.load(other), out, resume=True, progress=False)
    assert_identical(ref, out)


@pytest.mark.usefixtures("one_thread")
def test_stop_at_the_last_boundary_completes(tiny, tmp_path, monkeypatch):
    cfg_path, ref = tiny
    out = tmp_path / "run.h5"
    stop_after(monkeypatch, BOUNDARIES)
    runner.run(config.load(cfg_path), out, progress=False)
    assert leftovers(out) == []
    assert_identical(ref, out)


@pytest.mark.usefixtures("one_thread")
def test_resume_edge_cases(tiny, tmp_path, monkeypatch):
    cfg_path, ref = tiny
    cfg = config.load(cfg_path)
    out = tmp_path / "run.h5"
    part, ckpt = out.with_name("run.h5.part"), out.with_name("run.h5.ckpt")
    # nothing to resume: starts from the beginning
    runner.run(cfg, out, resume=True, progress=False)
    assert_identical(ref, out)
    # already complete: nothing is touched
    st = out.stat()
    assert runner.run(cfg, out, resume=True, progress=False) == out
    assert out.stat().st_mtime_ns == st.st_mtime_ns
    # killed between deleting the checkpoint and the final rename: the complete part is moved
    out.rename(part)
    runner.run(cfg, out, resume=True, progress=False)
    assert leftovers(out) == []
    assert_identical(ref, out)
    # killed before the first checkpoint: starts over
    out.unlink()
    with monkeypatch.context() as m:
        stop_after(m, 3)
        with pytest.raises(Interrupted):
            runner.run(cfg, out, progress=False)
    ckpt.unlink()
    runner.run(cfg, out, resume=True, progress=False)
    assert_identical(ref, out)


@pytest.mark.usefixtures("one_thread")
def test_overwrite_keeps_the_old_output_until_complete(tiny, tmp_path, monkeypatch):
    cfg_path, ref = tiny
    out = tmp_path / "run.h5"
    out.write_bytes(b"an older result")
    real = runner.integrate
    seen = []

    def watching(*a, **kw):
        seen.append(out.read_bytes())
        return real(*a, **kw)
    monkeypatch.setattr(runner, "integrate", watching)
    with monkeypatch.context() as m:
        stop_after(m, 4)
        with pytest.raises(Interrupted):
            runner.run(config.load(cfg_path), out, overwrite=True, progress=False)
    assert out.read_bytes() == b"an older result"
    runner.run(config.load(cfg_path), out, resume=True, progress=False)
    assert seen == [b"an older result"] * 2
    assert_identical(ref, out)


def test_refusals_before_any_work(tiny, tmp_path):
    cfg_path, ref = tiny
    out = tmp_path / "run.h5"
    shutil.copy(ref, out)
    with pytest.raises(InputError, match="output exists"):
        runner.run(config.load(cfg_path), out, progress=False)
    with pytest.raises(InputError, match="exclude each other"):
        runner.run(config.load(cfg_path), out, overwrite=True, resume=True, progress=False)
    assert_identical(ref, out)


@pytest.mark.usefixtures("one_thread")
def test_divergence_exit_1_one_line_keeps_frames_and_checkpoint(tmp_path, capsys):
    """Stable at tau=1e-3, blown up by the noise at tau=1e300: the run stops within one
    observation interval of the blow-up, naming the step, tau and eta. (At tau=1e6 the
    particles reach |θ| ~ 1e49 and every ReLU dies, a finite state: whether that path ever
    overflows depends on the noise draws, so the test uses noise that overflows by itself.)"""
    cfg = tmp_path / "div.toml"
    cfg.write_text(tiny_text(100, {"dynamics.taus": [1e-3, 1e300], "dynamics.eta": 0.5}))
    out = tmp_path / "div.h5"
    code = cli.main(["run", str(cfg), "-o", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.strip().splitlines()
    # eta = 0.5 is past the stability limit the references predict at tau = 1e300, and the
    # ladder runs cold to hot from random particles: one warning line each before any work
    # (docs/cli.md), then the one error line
    warn = [ln for ln in lines if ln.startswith("meanfield: warning:")]
    assert len(warn) == 2 and "runs cold to hot" in warn[0] and "largest stable eta" in warn[1]
    lines = [ln for ln in lines if ln not in warn]
    assert len(lines) == 1 and "Traceback" not in err
    assert "diverged" in lines[0] and "between steps 300 and 320" in lines[0]
    assert "tau=1e+300" in lines[0] and "eta=0.5" in lines[0]
    assert "div.h5.part" in lines[0] and "div.h5.ckpt" in lines[0]
    assert leftovers(out) == ["div.h5.ckpt", "div.h5.part"] and not out.exists()
    run = open_run(out.with_name("div.h5.part"))
    assert not run.complete and run.n_frames == 3 and np.all(run.frame_tau == 1e-3)
    assert np.all(np.isfinite(run.frame(-1)))
    from meanfield import checkpoint
    from solvers.langevin import SolverState
    st, _ = checkpoint.load(out.with_name("div.h5.ckpt"), SolverState)
    assert st.step == 300 and st.stage == 1 and np.all(np.isfinite(st.theta))


# ----------------------------------------------------------------------------- subprocesses


def ckpt_step(path) -> int:
    """Global step of the checkpoint at ``path`` (-1 if there is none yet)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            return int(z["step"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return -1


@pytest.fixture(scope="module")
def kill_ref(tmp_path_factory):
    """The KILL config, its uninterrupted run file (written by the CLI; the warm-up run before
    it fills the numba cache for the later subprocesses), and the seconds from the appearance of
    ``.part`` to the first checkpoint and from there to the end."""
    d = tmp_path_factory.mktemp("killref")
    cfg = d / "kill.toml"
    cfg.write_text(KILL)
    run_cli(["run", cfg, "-o", d / "warm.h5", "--quiet"], d)     # compile or load the kernels
    out = d / "ref.h5"
    p = start(["run", cfg, "-o", out, "--quiet"], d)
    assert wait_for(lambda: out.with_name("ref.h5.part").exists(), p)
    t_part = time.monotonic()
    assert wait_for(lambda: out.with_name("ref.h5.ckpt").exists(), p)
    t_ckpt = time.monotonic()
    _, err = p.communicate(timeout=300)
    t_end = time.monotonic()
    assert p.returncode == 0, err
    assert_identical(d / "warm.h5", out)
    return cfg, out, t_ckpt - t_part, t_end - t_ckpt


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_writes_checkpoint_exit_130_and_resume_matches(kill_ref, tmp_path, sig):
    cfg, ref, _, _ = kill_ref
    out = tmp_path / "run.h5"
    p = start(["run", cfg, "-o", out, "--quiet"], tmp_path)
    assert wait_for(lambda: out.with_name("run.h5.ckpt").exists(), p)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("meanfield: interrupted at step ") and "--resume" in last
    assert leftovers(out) == ["run.h5.ckpt", "run.h5.part"]
    partial = assert_prefix_of(ref, out.with_name("run.h5.part"))
    assert not partial.complete
    r = run_cli(["run", cfg, "-o", out, "--resume", "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert leftovers(out) == []
    assert_identical(ref, out)


@pytest.mark.long
@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_matches(kill_ref, tmp_path):
    """20 runs killed with SIGKILL at random moments while they write (5 of their resumes
    killed again): after every kill the file opens with ``meanfield inspect`` and its committed
    rows equal the uninterrupted run's; every resume completes bitwise identical.

    The moments are random in progress, not in wall time (which depends on the load): a random
    checkpoint k of the K the run writes is awaited (k = 0: none), then a random fraction of the
    time one checkpoint interval took in the reference run.
    """
    cfg, ref, t_first, t_rest = kill_ref
    c = config.load(cfg)
    every = int(c.output.checkpoint_every)
    K = int(c.dynamics.steps_per_tau) * len(c.taus) // every
    interval = t_rest / K
    seed = int(os.environ.get("MEANFIELD_KILL_SEED", "20260601"))
    rng = random.Random(seed)
    kills = readable = identical = 0
    landed = []

    def kill_and_check(args, out, resumed_from):
        nonlocal kills, readable
        part, ckpt = (out.with_name(out.name + ext) for ext in (".part", ".ckpt"))
        lo = resumed_from // every + (1 if resumed_from else 0)
        k = rng.randrange(lo, K) if lo < K else K
        p = start(args, tmp_path)
        if k == 0:
            wait_for(lambda: part.exists() or out.exists(), p)
            time.sleep(rng.uniform(0, t_first))
        else:
            wait_for(lambda: ckpt_step(ckpt) >= k * every or out.exists(), p)
            time.sleep(rng.uniform(0, interval))
        p.kill()
        p.communicate()
        kills += 1
        target = part if part.exists() else out
        r = run_cli(["inspect", target, "--json"], tmp_path)
        assert r.returncode == 0, f"seed {seed}: {target} after kill: {r.stderr}"
        partial = assert_prefix_of(ref, target)
        assert len(json.loads(r.stdout)["frames"]) == partial.n_frames
        landed.append((partial.n_frames, len(partial.observables["risk"]["step"]),
                       ckpt_step(ckpt)))
        readable += 1
        return max(ckpt_step(ckpt), 0)

    for trial in range(20):
        out = tmp_path / f"k{trial:02d}.h5"
        at = kill_and_check(["run", cfg, "-o", out, "--quiet"], out, 0)
        if trial % 4 == 3:
            kill_and_check(["run", cfg, "-o", out, "--resume", "--quiet"], out, at)
        r = run_cli(["run", cfg, "-o", out, "--resume", "--quiet"], tmp_path)
        assert r.returncode == 0, f"seed {seed}: {r.stderr}"
        assert leftovers(out) == []
        assert_identical(ref, out)
        identical += 1
        out.unlink()
    completed = sum(1 for _, obs, step in landed if step < 0 and obs == 160)
    print(f"\nkill test (seed {seed}): {kills} SIGKILLs, {readable} files readable after "
          f"kills, {identical}/20 resumes identical, {completed} kills after completion; "
          f"(frames, observations, checkpoint step) after each kill: {landed}")
    assert kills == 25 and readable == 25 and identical == 20
