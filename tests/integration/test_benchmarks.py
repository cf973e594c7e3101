"""The benchmark peers perform the same update as the kernel (so the timings compare like with
like): drift against solvers.numpy_model, and noise of standard deviation sqrt(2 η τ)."""

import math
from pathlib import Path

import pytest
from conftest import REPO

from benchmarks import bench_step as bs
from benchmarks.common import ETA, TAU, problem


def impls():
    return bs.implementations(with_torch=True)   # without torch: ours and NumPy only


def test_peers_take_the_reference_drift_step():
    X, y, theta = problem(900, 6, 2, seed=1)
    dev = bs.check_identical_update(impls(), X, y, theta)
    assert len(dev) >= 2
    assert all(v < 1e-12 for v in dev.values()), dev


@pytest.mark.parametrize("cls", impls(), ids=lambda c: c.name)
def test_peers_add_noise_of_the_right_scale(cls):
    X, y, theta = problem(5000, 6, 2, seed=2)
    quiet, noisy = cls(X, y, theta), cls(X, y, theta)
    quiet.run(1, tau=0.0)
    noisy.run(1, tau=TAU)
    xi = (noisy.theta() - quiet.theta()) / math.sqrt(2 * ETA * TAU)
    m = xi.size
    assert abs(xi.mean()) < 5 / math.sqrt(m)
    assert abs(xi.var() - 1) < 5 * math.sqrt(2 / m)


def test_accuracy_benchmarks_load_every_shipped_problem():
    """The accuracy benchmarks (time_to_accuracy, warm_start, step_and_particle_bias) read the
    shipped CSVs, whose header names the target: each loads with its config's lambda."""
    import numpy as np

    from benchmarks.accuracy import PROBLEMS, load
    from meanfield import config, data
    for name, (path, _lam) in PROBLEMS.items():
        X, y, lam = load(name)
        cfg = config.load(REPO / path.replace(".csv", ".toml"))
        ds = data.from_config(cfg)
        assert np.array_equal(X, ds.X) and np.array_equal(y, ds.y), name
        assert lam == cfg.dynamics.lam, name


def test_accuracy_benchmarks_run_an_integrator_at_its_own_step():
    """``NAME@ETA`` runs one integrator at its own step beside the others at every --etas (the
    exact sampler's step is far above Euler's limit); a bad step is one line naming the entry."""
    from benchmarks.accuracy import integrator_etas
    assert integrator_etas(["mala@0.5", "em", "mala+n@2"], [0.1, 0.05]) == [
        ("mala", 0.5), ("em", 0.1), ("em", 0.05), ("mala+n", 2.0)]
    for bad in ("mala@", "mala@x", "mala@-0.1", "mala@0", "mala@inf", "em@0.1@0.2"):
        with pytest.raises(SystemExit, match=f"--integrators {bad}: the step"):
            integrator_etas([bad], [0.1])
    with pytest.raises(SystemExit, match="--integrators nosuch@0.1: unknown integrator "
                                         "'nosuch'; one of em, mala"):
        integrator_etas(["em", "nosuch@0.1"], [0.1], ("em", "mala"))


@pytest.mark.slow
def test_time_to_accuracy_runs_each_integrator_at_its_own_step(capsys):
    """``mala@0.3`` runs at 0.3 only beside Euler at each --etas, in one process; with
    --no-peer the summary does not speak of a peer."""
    from benchmarks.time_to_accuracy import main
    results = main(["--integrators", "mala@0.3", "em", "--etas", "0.1", "0.05", "--Ns", "60",
                    "--starts", "convex", "--no-peer", "--budget", "0.5"])
    assert [c[:2] for c, _ in results] == [("mala", 0.3), ("em", 0.1), ("em", 0.05)]
    out = capsys.readouterr().out
    assert "| mala | 0.3 | 60 | convex |" in out and "| em | 0.05 | 60 | convex |" in out
    assert "peer" not in out.lower()


def test_step_bias_fit_leaves_out_an_integrator_run_at_one_step():
    """An integrator at one step only (``mala@0.2``) gets no ``η^p`` term, which one step
    cannot separate from the rest; Euler's three steps still give its exponent."""
    import numpy as np

    from benchmarks.step_and_particle_bias import fit
    def e(eta, N):
        return np.array([0.02 * eta + 1.0 / N, -0.01 * eta + 2.0 / N])

    se = np.full(2, 1e-6)
    rows = [("em", eta, 4000, e(eta, 4000), se) for eta in (0.1, 0.05, 0.025)]
    rows += [("em", 0.05, N, e(0.05, N), se) for N in (1000, 16000)]
    rows += [("mala", 0.2, N, np.array([1.0 / N, 2.0 / N]), se) for N in (4000, 1000)]
    res = fit(rows)
    assert set(res["p"]) == {"em"} and res["p"]["em"] == pytest.approx(1.0)
    np.testing.assert_allclose(res["A"]["em"], [0.02, -0.01], atol=1e-6)
    np.testing.assert_allclose(res["B"], [1.0, 2.0], atol=1e-4)


#: The generated sets of benchmarks/ray_counts.py and the convex counts its docstring states.
GENERATED_SETS = {"zero_d1": (0, 0), "zero_d2": (0, 0), "nine_1d": (4, 4), "six_1d": (4, 3),
                  "gauss8_d3": (4, 4), "gauss10_d2": (3, 3)}


@pytest.mark.parametrize("name", sorted(GENERATED_SETS))
def test_ray_counts_generated_sets_are_valid_configs_with_the_stated_convex_counts(name,
                                                                                   tmp_path):
    """Each generated set's cell config loads as a run config with the cell's width, seed,
    ladder and stage span; its data give the convex counts stated in the benchmark, with a
    step well inside the Euler limit of the convex reference's data mode."""
    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    from benchmarks import ray_counts as rc
    from meanfield import config, data
    from solvers.stability import convex_data_mode
    path = tmp_path / "cell.toml"
    path.write_text(rc.dump_toml(rc.cell_config(name, 700, 3, span_scale=0.5)))
    cfg = config.load(path)
    ds = data.from_config(cfg)
    _, _, taus, span = rc.SETS[name]
    dyn = cfg.dynamics
    assert cfg.model.n_particles == 700 and dyn.seed == 3
    assert list(cfg.taus) == taus
    assert dyn.steps_per_tau * dyn.eta == pytest.approx(0.5 * span, rel=1e-6)
    conv = convex_reference(ds.X, ds.y, dyn.lam)
    cc = convex_counts(conv, ds.X)
    assert (cc["J"], cc["K"]) == GENERATED_SETS[name]
    assert convex_data_mode(conv, ds.X, dyn.lam).eta_lambda_max(dyn.eta) <= 0.42


def test_ray_counts_every_set_gives_a_valid_fixed_stage_config(tmp_path):
    """Every set's cell config, shipped configs with an ``"auto"`` ladder included (D7 keeps a
    ``max_steps_per_tau``), loads as a run config with fixed stages of the cell's span."""
    from benchmarks import ray_counts as rc
    from meanfield import config
    for name, (_, _, taus, span) in rc.SETS.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(rc.dump_toml(rc.cell_config(name, 300, 1, span_scale=2)))
        cfg = config.load(path)
        dyn = cfg.dynamics
        assert list(cfg.taus) == list(taus), name
        assert dyn.steps_per_tau * dyn.eta == pytest.approx(2 * span, rel=1e-3), name
        assert not dyn.max_steps_per_tau, name
    path.write_text(rc.dump_toml(rc.cell_config("D7", 300, 1, 1.0, "mala", 2)))
    dyn = config.load(path).dynamics
    assert (dyn.integrator, dyn.chains) == ("mala", 2)
    assert rc.cell_stem("D7", 300, 1, 1.0, "mala", 2) == "D7-N300-s1-mala-c2"
    assert rc.cell_stem("D7", 300, 1) == "D7-N300-s1"        # old run files keep their names
    # an overridden step keeps the stage's span of mean-field time, and names the file
    path.write_text(rc.dump_toml(rc.cell_config("D7", 300, 1, 2.0, "mala", 1, eta=0.5)))
    dyn = config.load(path).dynamics
    assert dyn.eta == 0.5 and dyn.steps_per_tau == round(2 * rc.SETS["D7"][3] / 0.5)
    assert rc.cell_stem("D7", 300, 1, 2.0, "mala", 1, 0.5) == "D7-N300-s1-x2-mala-eta0.5"
    # the exact sampler without an overridden step runs at MALA_ETA; --auto stages end at
    # their verdict, at most --auto-steps (or the span), observed AUTO_OBSERVATIONS_PER_STAGE
    # times over that
    path.write_text(rc.dump_toml(rc.cell_config("D7", 300, 1, 1.0, "mala", auto=True,
                                                auto_steps=40000)))
    dyn = config.load(path).dynamics
    out = config.load(path).output
    assert dyn.eta == rc.MALA_ETA and dyn.steps_per_tau == "auto"
    assert dyn.max_steps_per_tau == 40000
    assert out.observe_every == 40000 // rc.AUTO_OBSERVATIONS_PER_STAGE
    path.write_text(rc.dump_toml(rc.cell_config("plane8", 300, 1, 1.0, "em", auto=True)))
    dyn = config.load(path).dynamics
    assert dyn.max_steps_per_tau == round(rc.SETS["plane8"][3] / dyn.eta)
    assert rc.cell_stem("D7", 300, 1, 1.0, "mala", auto=True, auto_steps=40000) == \
        "D7-N300-s1-mala-auto40000"
    assert rc.cell_stem("D7", 300, 1, 1.0, "mala", auto=True) == "D7-N300-s1-mala-auto"
    with pytest.raises(SystemExit):
        rc.main(["--auto-steps", "100"])            # --auto-steps without --auto
    # --fine: a set built here (no fine key) gets the share, a shipped config's is replaced,
    # an Euler cell drops it; the file name says it
    for name, share in (("plane10_light", 0.5), ("plane8", 0.0)):
        path.write_text(rc.dump_toml(rc.cell_config(name, 300, 1, 1.0, "mala", auto=True,
                                                    fine=share)))
        assert config.load(path).dynamics.fine == share, name
    with pytest.raises(ValueError, match="exact sampler"):      # not dropped while the
        rc.cell_config("plane8", 300, 1, 1.0, "em", fine=0.5)   # file name says fine0.5
    path.write_text(rc.dump_toml(rc.cell_config("plane8", 300, 1, 1.0, "em")))
    assert config.load(path).dynamics.fine is None          # the shipped 0.5 is dropped
    assert rc.cell_stem("D7", 300, 1, 1.0, "mala", auto=True, fine=0.5) == \
        "D7-N300-s1-mala-auto-fine0.5"
    with pytest.raises(SystemExit):
        rc.main(["--fine", "2"])
    with pytest.raises(SystemExit):
        rc.main(["--fine", "0.5", "--integrator", "em"])
    with pytest.raises(SystemExit):     # a set built here runs Euler unless told: refused
        rc.main(["--fine", "0.5", "--sets", "plane8", "zero_d1", "--workdir",     # before
                 str(tmp_path / "none")])                                        # any run
    assert not (tmp_path / "none").exists()



def test_ray_counts_runs_a_cell_into_a_relative_workdir(tmp_path, monkeypatch):
    """A ``--workdir`` relative to the caller's folder: the runs start in the checkout, and
    were refused with "no such file" when the path was passed on as given."""
    from benchmarks import ray_counts as rc
    monkeypatch.chdir(tmp_path)
    assert rc.main(["--sets", "two_point_even", "--N", "20", "--seeds", "0",
                    "--span-scale", "0.01", "--runs-only", "--workdir", "rel"]) == 0
    assert (tmp_path / "rel" / "two_point_even-N20-s0-x0.01.h5").is_file()

def _processes_naming(text: str) -> list:
    """Pids of the processes whose command line contains ``text`` (Linux ``/proc``)."""
    out = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if text in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="ignore"):
                out.append(int(d.name))
        except OSError:
            continue
    return out


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_ray_counts_killed_takes_its_running_cell_with_it(tmp_path):
    """SIGTERM to the script (``timeout``, a batch system) stopped the script and left the
    cell's ``meanfield run`` running, detached, writing into the next command's stderr."""
    import os
    import signal
    import subprocess
    import sys
    import time
    work = tmp_path / "w"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "ray_counts.py"
    p = subprocess.Popen([sys.executable, str(script), "--sets", "two_point_even", "--N",
                          "2000", "--seeds", "0", "--span-scale", "100", "--runs-only",
                          "--workdir", str(work)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        t0 = time.monotonic()
        while not _processes_naming(str(work / "two_point_even")):
            assert p.poll() is None and time.monotonic() - t0 < 120, "the cell never started"
            time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=60) != 0
        t0 = time.monotonic()
        while _processes_naming(str(work / "two_point_even")) and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        assert _processes_naming(str(work / "two_point_even")) == []
        assert not (work / "two_point_even-N2000-s0-x100.h5").exists()
    finally:                # a failure leaves nothing running on the machine
        p.kill()
        for pid in _processes_naming(str(work / "two_point_even")):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs Linux /proc")
def test_ray_counts_sigterm_while_the_cell_starts_takes_it_too(tmp_path, monkeypatch):
    """The race behind a killed script's surviving cell: SIGTERM arriving after the child's
    exec but before ``Popen`` returned raised inside ``Popen``, where ``subprocess.run`` does
    not kill the child. Here the signal arrives exactly then (sent from a wrapped ``Popen``);
    the cell must be gone when the KeyboardInterrupt reaches the caller."""
    import os
    import signal
    import subprocess
    import sys
    import threading

    from benchmarks import ray_counts as rc
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are the main thread's")
    real = subprocess.Popen
    started = []

    def popen_then_sigterm(*a, **kw):
        child = real(*a, **kw)
        started.append(child)
        os.kill(os.getpid(), signal.SIGTERM)
        return child

    monkeypatch.setattr(subprocess, "Popen", popen_then_sigterm)
    previous = signal.signal(signal.SIGTERM, rc._interrupt)
    try:
        with pytest.raises(KeyboardInterrupt):
            rc._run_child([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path)
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in started:
            if child.poll() is None:
                child.kill()
    assert len(started) == 1 and started[0].returncode is not None


@pytest.mark.parametrize("name", ["zero_d1", "zero_d2"])
def test_ray_counts_zero_ray_sets_sit_well_above_the_threshold(name):
    """``λ ≥ 1.2 λ₀``, ``λ₀ = max_v |Σ_j y_j (v·x̃_j)_+|/n``: ``f = 0`` is the convex optimum
    with a margin, so the reference has no ray whatever the solver's tolerance."""
    from benchmarks import ray_counts as rc
    from meanfield import config, data
    from solvers.convex import max_abs_G
    cfg = config.from_dict(rc.cell_config(name, 500, 0))
    ds = data.from_config(cfg)
    lam0 = max_abs_G(-ds.y / len(ds.y), ds.X, 1.0)[0]
    assert cfg.dynamics.lam >= 1.2 * lam0 > 0


@pytest.mark.parametrize("name, on_points", [("nine_1d", [-0.75, -0.25, 0.25, 0.75]),
                                             ("six_1d", [-0.4, 0.0, 0.7])])
def test_ray_counts_one_d_sets_have_their_convex_kinks_on_data_points(name, on_points):
    from analysis.ray_checks import convex_counts
    from analysis.references import convex_reference
    from benchmarks import ray_counts as rc
    from meanfield import config, data
    cfg = config.from_dict(rc.cell_config(name, 500, 0))
    ds = data.from_config(cfg)
    cc = convex_counts(convex_reference(ds.X, ds.y, cfg.dynamics.lam), ds.X)
    at = sorted(float(k.offset / k.normal[0]) for k in cc["kinks"])
    assert at == pytest.approx(on_points, abs=1e-6)
    assert all(min(abs(ds.X[:, 0] - x)) < 1e-9 for x in on_points)
    if name == "six_1d":                     # two rays share the kink on x = −0.4
        assert sorted(len(k.rays) for k in cc["kinks"]) == [1, 1, 2]


class _FakeSystem:
    """A system whose predictor is a fixed vector (the run records it unchanged)."""

    def __init__(self, f):
        self.f = f

    def run(self, k, tau):
        pass

    def predictor(self):
        return self.f


@pytest.mark.parametrize("N_big,N_small", [(4000, 2000), (4000, 1000), (3000, 2000)])
def test_time_to_accuracy_n_pair_removes_a_bias_linear_in_one_over_n(N_big, N_small):
    """Predictors f_inf + c/N at N and N_small combine to f_inf exactly; the MCSE is
    sqrt(w1^2 s1^2 + w2^2 s2^2) with the weights w1 = r/(r-1), w2 = -1/(r-1), r = N/N_small,
    the closed form of two independent estimates whose 1/N term cancels."""
    import numpy as np

    from benchmarks.time_to_accuracy import NPair
    rng = np.random.default_rng(3)
    f_inf, c = rng.normal(size=8), rng.normal(size=8)
    s1, s2 = rng.uniform(1e-4, 1e-3, 8), rng.uniform(1e-4, 1e-3, 8)
    pair = NPair(_FakeSystem(f_inf + c / N_big), _FakeSystem(f_inf + c / N_small),
                 N_big / N_small)
    f = pair.predictor()
    m, se = pair.combine(f, np.concatenate([s1, s2]))
    assert np.allclose(m, f_inf, rtol=0, atol=1e-14)
    # weights solving w1 + w2 = 1, w1/N_big + w2/N_small = 0
    w1 = (1 / N_small) / (1 / N_small - 1 / N_big)
    w2 = 1 - w1
    assert np.allclose(se, np.sqrt(w1 ** 2 * s1 ** 2 + w2 ** 2 * s2 ** 2), rtol=1e-12)
    assert pair.steps_factor == 2


def test_time_to_accuracy_n_pair_of_richardson_pairs_removes_both_biases():
    """em-richardson+n: four fake chains with f = f0 + a eta + c/N combine to f0 exactly."""
    import numpy as np

    from benchmarks.time_to_accuracy import NPair, RichardsonPair
    rng = np.random.default_rng(4)
    f0, a, c = rng.normal(size=5), rng.normal(size=5), rng.normal(size=5)
    eta = 0.1

    def rich(N):
        p = RichardsonPair.__new__(RichardsonPair)
        p.coarse = _FakeSystem(f0 + a * eta + c / N)
        p.fine = _FakeSystem(f0 + a * eta / 2 + c / N)
        return p

    pair = NPair(rich(4000), rich(1000), 4.0)
    f = pair.predictor()
    m, se = pair.combine(f, np.full(20, 1e-4))
    assert np.allclose(m, f0, rtol=0, atol=1e-13)
    # Richardson: sqrt(2^2 + 1) s; then the 1/N pair at r = 4: sqrt(4^2 + 1)/3
    assert np.allclose(se, 1e-4 * math.sqrt(5) * math.sqrt(17) / 3, rtol=1e-12)
    assert pair.steps_factor == 6
