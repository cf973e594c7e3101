"""Stationarity verdicts and the stability guard on real runs (meanfield.runner).

Oracles: the stability limit predicted by the references (a run past it must stop with the
one-line message and its partial file must be judged unstable); a stage far too short to relax
must be judged not stationary; relaxed runs (Ornstein–Uhlenbeck chain, plane8) must be judged
stationary; ``steps_per_tau = "auto"`` must resume bitwise and end stages early only when
their verdict holds.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from analysis.stationarity import run_verdicts, verdict
from meanfield import config, runner
from meanfield.errors import UnstableStepError
from meanfield.store import open_run

D4 = """\
[data]
kind = "inline"
X = [-5.0, -4.0, 4.0, 5.0]
y = [4.0, 1.0, 1.0, 4.0]
[model]
n_particles = {N}
[dynamics]
lam = 0.003
eta = {eta}
taus = {taus}
steps_per_tau = {steps}
{extra}
[output]
observe_every = {every}
snapshots_per_tau = 2
checkpoint_every = 2000
"""


def d4(tmp_path, name="d4", N=100, eta=0.005, taus="[5e-3]", steps=20000, every=51, extra=""):
    p = tmp_path / f"{name}.toml"
    p.write_text(D4.format(N=N, eta=eta, taus=taus, steps=steps, every=every, extra=extra))
    return config.load(p)


@pytest.mark.usefixtures("one_thread")
def test_step_past_the_limit_warns_stops_and_is_judged_unstable(tmp_path):
    from solvers.convex import convex
    from solvers.stability import convex_data_mode
    X, y = np.array([[-5.0], [-4.0], [4.0], [5.0]]), np.array([4.0, 1.0, 1.0, 4.0])
    limit = convex_data_mode(convex(X, y, 0.003), X, 0.003).largest_stable_eta()
    cfg = d4(tmp_path, "osc", eta=round(1.1 * limit, 5), steps=40000)
    logs = []
    out = tmp_path / "osc.h5"
    with pytest.raises(UnstableStepError) as info:
        runner.run(cfg, out, progress=False, log=logs.append)
    msg = str(info.value)
    assert "\n" not in msg and "unstable step" in msg and f"eta={cfg.dynamics.eta:g}" in msg
    assert "tau=0.005" in msg and "step" in msg
    assert any(m.startswith("warning:") and "largest stable eta" in m for m in logs)
    part = out.with_name("osc.h5.part")
    assert part.exists() and not out.exists()
    v = run_verdicts(open_run(part))[0]
    assert not v.stationary and v.eta_lambda_max >= 2
    assert any(r.startswith("unstable step") for r in v.reasons)


@pytest.mark.usefixtures("one_thread")
def test_unrelaxed_stage_is_not_stationary(tmp_path):
    cfg = d4(tmp_path, "short", taus="[5e-4]", steps=3000, every=11)
    r = open_run(runner.run(cfg, tmp_path / "short.h5", progress=False))
    v = run_verdicts(r)[0]
    assert not v.stationary
    assert any(r.startswith(("drift", "too few effective")) for r in v.reasons)
    assert v.eta_lambda_max < 2


def test_relaxed_ornstein_uhlenbeck_chain_is_stationary():
    """Data term off: exactly an OU process, relaxed from its stationary law."""
    from solvers.stepper import Stepper
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((6, 2)), rng.standard_normal(6)
    N, lam, eta, tau = 200, 1.0, 0.05, 0.1
    st = Stepper(X, y, N, lam=lam, eta=eta, seed=4)
    theta = np.ascontiguousarray(rng.standard_normal((N, 4)) * np.sqrt(tau / lam))
    steps, F = [], []
    for k in range(8000):     # 2000 sufficed for the older floor of 20 effective samples
        st.advance(theta, tau, 11 * k, 11, data_term=False)
        steps.append(11 * (k + 1))
        F.append(st.f.copy())
    v = verdict(np.array(steps), np.array(F))
    assert v.stationary, v.reasons


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_relaxed_plane8_run_is_stationary(tmp_path):
    from pathlib import Path
    src = (Path(__file__).resolve().parents[2] / "data" / "plane8.toml").read_text()
    src = src.replace('path = "plane8.csv"',
                      f'path = "{Path(__file__).resolve().parents[2] / "data" / "plane8.csv"}"')
    # Euler-Maruyama relaxing on its own (the shipped config runs the exact sampler)
    src = (src.replace("n_particles = 4000", "n_particles = 400")
           .replace('integrator = "mala"', 'integrator = "em"')
           .replace("fine = 0.5\n", "")
           .replace("eta = 0.2", "eta = 0.05")
           .replace("chains = 2", "chains = 1")
           .replace("taus = [1e-2, 1e-3, 1e-4]", "taus = [1e-2]")
           .replace('steps_per_tau = "auto"', "steps_per_tau = 1600000")
           .replace("max_steps_per_tau = 40000\n", "")
           .replace("observe_every = 20", "observe_every = 101"))
    # 1.6e6 steps: about 900 effective samples in the second half, what R-hat < 1.01 within
    # one chain needs (200 000 sufficed for the older floor of 20; its R-hat read 1.015)
    assert "steps_per_tau = 1600000" in src and "max_steps" not in src
    assert 'integrator = "em"' in src and "eta = 0.05" in src and "chains = 1" in src
    assert "fine =" not in src           # fine steps exist only in the exact sampler
    p = tmp_path / "p8.toml"
    p.write_text(src)
    r = open_run(runner.run(config.load(p), tmp_path / "p8.h5", progress=False))
    v = run_verdicts(r)[0]
    assert v.stationary, v.reasons


@pytest.mark.long
@pytest.mark.usefixtures("one_thread")
def test_auto_stages_end_on_their_verdict_and_resume_bitwise(tmp_path):
    from meanfield import data as _data
    cfg = d4(tmp_path, "auto", N=60, taus="[5e-2, 5e-3]", steps='"auto"', every=7,
             extra="max_steps_per_tau = 48000")
    sch = cfg.schedule
    assert sch.auto and sch.stage_length(0) == 48000
    per = cfg.output.snapshots_per_tau              # frames per chunk of 6000 steps
    assert 6000 % per == 0 and sch.snapshots(0) == [6000 * k // per
                                                    for k in range(1, 8 * per + 1)]
    ds = _data.from_config(cfg)
    done = runner.loop._stage_stationary(ds.y)
    full = runner.integrate(cfg, ds, progress=False, stage_done=done)
    # interrupted at some boundary and resumed from a copy of the state there
    saved = {}
    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        return calls["n"] == 900

    def ckpt(st):
        saved["s"] = copy.deepcopy(st)
    part = runner.integrate(cfg, ds, progress=False, stage_done=done, should_stop=stop,
                            on_checkpoint=ckpt)
    assert part.stage < 2
    resumed = runner.integrate(cfg, ds, state=saved["s"], progress=False, stage_done=done)
    assert resumed.step == full.step
    assert resumed.theta.tobytes() == full.theta.tobytes()
    # and through the runner: rows of early-ended stages are dropped, the stage of every row
    # is stored (checked against the temperatures: this ladder's are distinct)
    r = open_run(runner.run(cfg, tmp_path / "auto.h5", progress=False))
    assert r.complete
    tau = r.observables["tau"]["value"]
    np.testing.assert_array_equal(np.asarray([5e-2, 5e-3])[r.stage], tau)
    steps = r.observables["tau"]["step"]
    ends = [int(steps[r.stage == s][-1]) for s in range(2)]
    bounds = [(0, ends[0]), (ends[0], ends[1])]
    lengths = [hi - lo for lo, hi in bounds]
    assert [r.steps_run(s) for s in range(2)] == lengths
    assert [r.schedule.stage_bounds(s) for s in range(2)] == bounds
    assert list(full.stage_lengths) == lengths
    assert all(L % 6000 == 0 and 12000 <= L <= 48000 for L in lengths)
    vs = run_verdicts(r)
    for L, v in zip(lengths, vs):
        if L < 48000:          # ended early: its verdict (observables only) held
            assert v.stationary or v.reasons == [v.reasons[0]] and "ray" in v.reasons[0]
    assert full.step == sum(lengths)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_auto_stage_progress_ends_at_100_percent(tmp_path, capsys, monkeypatch):
    """Progress counts the budget of every stage; when a stage ends on its verdict the total
    shrinks, so the last line reads the steps run, at 100 %, not a fraction of the budget."""
    from conftest import plane8_toml

    from meanfield import data as _data
    from meanfield import progress as _progress
    monkeypatch.setattr(_progress, "PLAIN_EVERY", 0.0)
    p = tmp_path / "p8.toml"
    p.write_text(plane8_toml({"dynamics.steps_per_tau": "auto", "dynamics.taus": [1e-2, 1e-3],
                              "dynamics.max_steps_per_tau": 320000}))
    cfg = config.load(p)
    # a verdict that holds from the second chunk on: the R-hat/ESS verdict keeps these short
    # plane8 stages to their budget, and what is tested here is the progress, not the verdict
    end = runner.integrate(cfg, _data.from_config(cfg), progress=True,
                           stage_done=lambda state: state.step_in_stage >= 80000)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("run: ")]
    assert end.step < 2 * 320000                      # a stage ended on its verdict
    assert lines[0].split()[1].endswith(f"/{2 * 320000}")
    assert all("about" not in ln for ln in lines) and "at most" in lines[0]
    assert lines[-1].startswith(f"run: {end.step}/{end.step} steps (100%)")
