"""``integrator = "mala"`` through the run pipeline: the config schema (``dynamics.jumps``,
``dynamics.radial``, their hash), the acceptance observables in the run file and ``meanfield inspect``, and a run stopped
or killed and resumed being bitwise identical to an uninterrupted one."""

from __future__ import annotations

import signal

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

from meanfield import config, runner
from meanfield.errors import Interrupted
from meanfield.store import open_run

MALA = {"dynamics.integrator": "mala", "dynamics.jumps": 0.3, "output.checkpoint_every": 60}


def test_schema_defaults_and_hash(tmp_path):
    em = config.loads(tiny_toml(), "em.toml", tmp_path)
    assert em.dynamics.jumps is None and "jumps" not in em.as_dict()["dynamics"]
    m = config.loads(tiny_toml({"dynamics.integrator": "mala"}), "m.toml", tmp_path)
    assert m.dynamics.jumps == 0.1 and m.as_dict()["dynamics"]["jumps"] == 0.1
    m0 = config.loads(tiny_toml({"dynamics.integrator": "mala", "dynamics.jumps": 0}),
                      "m0.toml", tmp_path)
    assert m0.dynamics.jumps == 0.0 and m0.physics_hash() != m.physics_hash()
    assert em.dynamics.radial is None and "radial" not in em.as_dict()["dynamics"]
    assert m.dynamics.radial == 1.0 and m.as_dict()["dynamics"]["radial"] == 1.0
    r0 = config.loads(tiny_toml({"dynamics.integrator": "mala", "dynamics.radial": 0}),
                      "r0.toml", tmp_path)
    assert r0.dynamics.radial == 0.0 and r0.physics_hash() != m.physics_hash()
    # a Metropolis-adjusted step is exact beyond the weight-decay limit eta*lam < 2
    big = config.loads(tiny_toml({"dynamics.integrator": "mala", "dynamics.eta": 50.0}),
                       "big.toml", tmp_path)
    assert big.dynamics.eta * big.dynamics.lam == 2.5


@pytest.fixture(scope="module")
def mala_ref(tmp_path_factory):
    import numba
    d = tmp_path_factory.mktemp("mala")
    cfg = d / "mala.toml"
    cfg.write_text(tiny_toml(MALA))
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        ref = runner.run(config.load(cfg), d / "ref.h5", progress=False)
    finally:
        numba.set_num_threads(old)
    return cfg, ref


def test_run_file_holds_acceptance_and_inspect_shows_it(mala_ref, tmp_path):
    cfg, ref = mala_ref
    run = open_run(ref)
    obs = run.observables
    M = len(obs["risk"]["step"])
    for name in ("acceptance", "jump_acceptance", "cell_exchange", "radial_acceptance"):
        v = np.asarray(obs[name]["value"])
        assert v.shape == (M,) and np.all(np.isfinite(v)), name
    assert np.all((obs["acceptance"]["value"] > 0.5) & (obs["acceptance"]["value"] <= 1))
    assert np.all((obs["jump_acceptance"]["value"] > 0) & (obs["jump_acceptance"]["value"] < 1))
    assert np.all((obs["radial_acceptance"]["value"] > 0.3)
                  & (obs["radial_acceptance"]["value"] <= 1))
    assert np.all(np.isnan(obs["eta_lambda_max"]["value"]))
    r = run_cli(["inspect", ref], tmp_path)
    assert r.returncode == 0, r.stderr
    dyn = next(line for line in r.stdout.splitlines() if line.strip().startswith("[dynamics]"))
    assert 'integrator = "mala"' in dyn and "jumps = 0.3" in dyn, dyn
    assert r.stdout.count(" acceptance=") == 2 and r.stdout.count("jump_acceptance=") == 2
    assert r.stdout.count("radial_acceptance=") == 2
    from meanfield.report import analyze_run, markdown
    rep = analyze_run(ref, None, figures=False, w2=False, references=False,
                      sensitivity=False)
    for row in rep["ladder"]:
        v = row["stationarity"]
        sel = np.asarray(obs["tau"]["value"]) == row["tau"]
        half = np.asarray(obs["acceptance"]["value"])[sel]
        assert v["acceptance"] == pytest.approx(half[len(half) // 2:].mean())
        assert 0 < v["jump_acceptance"] < 1 and v["cell_exchange"] >= 0
        assert 0.3 < v["radial_acceptance"] <= 1
    assert markdown(rep).count("jump acceptance") == 2
    assert markdown(rep).count("radial acceptance") == 2


def test_a_pass_is_no_time_step_in_inspect_the_report_and_the_figure(mala_ref, tmp_path):
    """The exact sampler's step is a pass of Metropolis moves: ``inspect``, the report and the
    trajectory figure count passes and show no mean-field time ``step · eta``."""
    _, ref = mala_ref
    run = open_run(ref)
    r = run_cli(["inspect", ref], tmp_path)
    frames = [ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith("pass=")]
    assert len(frames) == run.n_frames and not any("time=" in ln for ln in frames)
    assert " step=" not in r.stdout
    assert sum(" passes=" in ln for ln in r.stdout.splitlines()) == len(run.taus)
    from meanfield.figures.trajectory import plot_trajectory
    from meanfield.report import analyze_run, markdown
    rep = analyze_run(ref, None, figures=False, w2=False, references=False,
                      sensitivity=False)
    assert rep["integrator"] == "mala" and rep["step_unit"] == "pass"
    assert "| τ | pass | stationary |" in markdown(rep)
    fig = plot_trajectory(rep, run)
    ax = fig.axes[2]
    assert ax.get_xlabel().startswith("passes (")
    # the x axis ends at the last pass, not at passes · eta
    assert ax.get_xlim()[1] == pytest.approx(run.schedule.stage_bounds(len(run.taus) - 1)[1])


def test_em_run_file_has_nan_acceptance(tmp_path):
    from conftest import run_one_thread
    path = run_one_thread(tiny_toml({"dynamics.steps_per_tau": 40}), tmp_path)
    obs = open_run(path).observables
    assert np.all(np.isnan(obs["acceptance"]["value"]))


@pytest.mark.parametrize("k", [3, 16])
def test_stop_then_resume_is_bitwise_identical(mala_ref, tmp_path, monkeypatch, k):
    import numba
    cfg, ref = mala_ref
    out = tmp_path / "run.h5"
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with monkeypatch.context() as m:
            stop_after(m, k)
            with pytest.raises(Interrupted):
                runner.run(config.load(cfg), out, progress=False)
        assert leftovers(out) == ["run.h5.ckpt", "run.h5.part"]
        numba.set_num_threads(2)           # the resume on another thread count
        runner.run(config.load(cfg), out, resume=True, progress=False)
    finally:
        numba.set_num_threads(old)
    assert leftovers(out) == []
    assert assert_identical(ref, out) > 40


#: test_resume's kill config with the exact sampler (and longer stages).
KILL_MALA = KILL.replace("steps_per_tau = 2000\nseed = 3\n",
                         'steps_per_tau = 3000\nseed = 3\nintegrator = "mala"\njumps = 0.2\n')
assert "mala" in KILL_MALA


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    cfg = tmp_path / "kill.toml"
    cfg.write_text(KILL_MALA)
    ref = tmp_path / "ref.h5"
    r = run_cli(["run", cfg, "-o", ref, "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "run.h5"
    p = start(["run", cfg, "-o", out, "--quiet"], tmp_path)
    ckpt = out.with_name("run.h5.ckpt")
    assert wait_for(ckpt.exists, p)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert not out.exists() and ckpt.exists()
    r = run_cli(["run", cfg, "-o", out, "--resume", "--quiet"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert leftovers(out) == []
    assert_identical(ref, out)
