"""The tuned Langevin kernels (solvers/_kernels.py via solvers.stepper.Stepper).

Oracles: the NumPy reference step of solvers.numpy_model given the same noise and minibatch
(THEORY §2), the exact Ornstein–Uhlenbeck variances of the Euler–Maruyama and
Leimkuhler–Matthews chains with the data term off, and the kernel itself run with other
thread counts and other chunkings (bitwise).
All tests use d = 2 so that the kernels compile once (one specialisation per d), except those
of the kernel with d at run time (dims = ()), which compiles once for every d and is checked
bitwise against the specialised one at d = 2 and against the reference at the first d beyond
solvers.stepper.SPECIALISED_DIMS.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from solvers import _activations
from solvers import _kernels as kernels
from solvers import numpy_model as model
from solvers import stepper as stepper_mod
from solvers.stepper import Stepper

D_IN = 2
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def problem(N=700, n=7, seed=0, scale=1.0):
    """Particles with pre-activations spread over [-3, 3] (N not a multiple of the block)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, D_IN)) * scale
    y = rng.standard_normal(n)
    theta = rng.standard_normal((N, D_IN + 2))
    return X, y, theta


def reference_step(st, theta, tau, step, act, sharp, cap):
    sigma, dsigma = model.activation(act, sharp, cap)
    batch = None if st.batch_size == 0 else st.batch(step)
    if st.integrator == "lm":
        return model.leimkuhler_matthews_step(theta, st.X, st.y, st.lam, st.eta, tau,
                                              st.noise(step), st.noise(step + 1), sigma, dsigma,
                                              batch=batch)
    return model.euler_maruyama_step(theta, st.X, st.y, st.lam, st.eta, tau, st.noise(step),
                                     sigma, dsigma, batch=batch)


CASES = [("relu", 10.0, 3.0), ("softplus", 4.0, 3.0), ("capped", 5.0, 0.8)]


@pytest.mark.parametrize("integrator", ["em", "lm"])
@pytest.mark.parametrize("act,sharp,cap", CASES)
@pytest.mark.parametrize("B", [0, 3])
def test_one_step_equals_reference(act, sharp, cap, B, integrator):
    X, y, theta = problem()
    st = Stepper(X, y, len(theta), lam=0.3, eta=0.05, activation=act, sharpness=sharp, cap=cap,
                 batch_size=B, seed=11, integrator=integrator)
    step, tau = 123, 0.02
    want = reference_step(st, theta, tau, step, act, sharp, cap)
    got = theta.copy()
    assert st.advance(got, tau, step, 1) == 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    # f and R after the step are on all n points, with R = (f - y)/n
    sigma, _ = model.activation(act, sharp, cap)
    np.testing.assert_allclose(st.f, model.predict(want, X, sigma), rtol=0, atol=1e-13)
    np.testing.assert_allclose(st.R, model.residuals(want, X, y, sigma), rtol=0, atol=1e-14)


@pytest.mark.parametrize("integrator", ["em", "lm"])
@pytest.mark.parametrize("act,sharp,cap", CASES)
@pytest.mark.parametrize("B", [0, 2])
def test_many_steps_equal_iterated_reference(act, sharp, cap, B, integrator):
    X, y, theta = problem(N=1100, n=6, seed=1)
    st = Stepper(X, y, len(theta), lam=0.2, eta=0.1, activation=act, sharpness=sharp, cap=cap,
                 batch_size=B, seed=5, integrator=integrator)
    want = theta.copy()
    for s in range(40, 60):
        want = reference_step(st, want, 0.01, s, act, sharp, cap)
    got = theta.copy()
    assert st.advance(got, 0.01, 40, 20) == 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11)


def test_leimkuhler_matthews_across_a_temperature_change():
    # step k at temperature τ_k adds sqrt(2ητ_k)(ξ_k + ξ_{k+1})/2: a stage boundary is two
    # calls, and equals the reference iterated with each step's own τ
    X, y, theta = problem(N=600, n=5, seed=4)
    st = Stepper(X, y, len(theta), lam=0.2, eta=0.1, seed=9, integrator="lm")
    taus = [0.05] * 6 + [0.002] * 5
    want = theta.copy()
    for s, tau in enumerate(taus):
        want = reference_step(st, want, tau, s, "relu", 10.0, 3.0)
    got = theta.copy()
    assert st.advance(got, 0.05, 0, 6) == 0 and st.advance(got, 0.002, 6, 5) == 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # and it is not Euler–Maruyama with the same noise
    em = Stepper(X, y, len(theta), lam=0.2, eta=0.1, seed=9)
    other = theta.copy()
    em.advance(other, 0.05, 0, 6)
    assert np.max(np.abs(other - got)) > 1e-3


def test_minibatch_is_unbiased_and_distinct_from_full_batch():
    # the minibatch drift averaged over steps tends to the full drift; a single one differs
    X, y, theta = problem(N=300, n=8, seed=2)
    st = Stepper(X, y, len(theta), lam=0.1, eta=0.1, batch_size=3, seed=4)
    full = model.drift(theta, X, y, 0.1)
    steps = 3000
    draws = np.stack([model.drift(theta, X, y, 0.1, batch=st.batch(s)) for s in range(steps)])
    se = draws.std(axis=0) / math.sqrt(steps)
    assert np.all(np.abs(draws.mean(axis=0) - full) <= 5 * se + 1e-12)
    assert np.max(np.abs(draws[0] - full)) > 1e-3
    # and the kernel's minibatch step is the reference with that batch, not the full one
    got = theta.copy()
    st.advance(got, 0.0, 0, 1)
    np.testing.assert_allclose(got, theta - 0.1 * draws[0], rtol=0, atol=1e-13)


@pytest.mark.parametrize("integrator", ["em", "lm"])
def test_chunking_does_not_change_the_run(integrator):
    for B in (0, 3):
        X, y, theta = problem(N=1300, seed=3)
        st = Stepper(X, y, len(theta), lam=0.1, eta=0.05, batch_size=B, seed=8,
                     integrator=integrator)
        one = theta.copy()
        st.advance(one, 0.05, 0, 12)
        parts = theta.copy()
        for s0, ns in ((0, 5), (5, 1), (6, 0), (6, 6)):
            st.advance(parts, 0.05, s0, ns)
        assert np.array_equal(one, parts)


THREADS_SCRIPT = r"""
import hashlib, json, sys
import numba, numpy as np
from solvers import stepper as stepper_mod
from solvers.stepper import Stepper
rng = np.random.default_rng(0)
X = rng.standard_normal((9, 2)); y = rng.standard_normal(9)
theta0 = rng.standard_normal((2600, 4))
out = {}
for threads, chunk in ((1, 0), (2, 0), (3, 0), (3, 1)):
    numba.set_num_threads(threads)
    numba.set_parallel_chunksize(chunk)
    for act, B, integ, dims in (("relu", 0, "em", (0, 0)), ("softplus", 4, "em", (0, 0)),
                                ("relu", 0, "lm", (0, 0)), ("softplus", 4, "lm", (0, 0)),
                                ("relu", 0, "em", ()), ("softplus", 4, "lm", ())):
        st = Stepper(X, y, len(theta0), lam=0.1, eta=0.05, activation=act, batch_size=B, seed=3,
                     integrator=integ)
        st.dims = dims
        th = theta0.copy()
        st.advance(th, 0.05, 0, 25)
        h = hashlib.sha256(th.tobytes() + st.R.tobytes()).hexdigest()
        out.setdefault(f"{act}-{B}-{integ}-{len(dims)}", []).append(h)
print(json.dumps(out))
"""


def test_bitwise_independent_of_thread_count():
    env = dict(os.environ, NUMBA_NUM_THREADS="3")
    res = subprocess.run([sys.executable, "-c", THREADS_SCRIPT], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    hashes = json.loads(res.stdout.strip().splitlines()[-1])
    for key, hs in hashes.items():
        assert len(hs) == 4 and len(set(hs)) == 1, key


@pytest.mark.parametrize("lam,eta,tau,distinct", [(1.0, 0.5, 0.3, True), (0.2, 0.1, 5.0, False)])
def test_ornstein_uhlenbeck_variance_with_data_term_off(lam, eta, tau, distinct):
    # θ ← (1 − ηλ) θ + sqrt(2ητ) ξ from θ = 0: Var θ_t = τ/(λ(1 − ηλ/2)) (1 − (1 − ηλ)^{2t})
    X, y, _ = problem(n=5)
    N, t = 100_000, 30
    st = Stepper(X, y, N, lam=lam, eta=eta, seed=21)
    theta = np.zeros((N, D_IN + 2))
    assert st.advance(theta, tau, 0, t, data_term=False) == 0
    want = model.ou_stationary_variance(lam, eta, tau) * (1 - (1 - eta * lam) ** (2 * t))
    var = theta.var(axis=0)
    se = want * math.sqrt(2 / N)
    assert np.all(np.abs(var - want) < 5 * se), (var, want)
    assert np.all(np.abs(theta.mean(axis=0)) < 5 * math.sqrt(want / N))
    if distinct:   # at ηλ = 0.5 the continuous-time value τ/λ is excluded
        assert np.all(np.abs(var - tau / lam) > 5 * se)


def _lm_ou_variance(lam, eta, tau, t):
    """Var θ_t of θ ← qθ + (s/2)(ξ_k + ξ_{k+1}) from θ_0 = 0, q = 1 − ηλ, s² = 2ητ: ξ_t enters
    with s/2, ξ_{t−m} (0 < m < t) with (s/2) q^{m−1}(1 + q), ξ_0 with (s/2) q^{t−1}."""
    q, s2 = 1 - eta * lam, 2 * eta * tau
    coef = [1.0] + [q ** (m - 1) * (1 + q) for m in range(1, t)] + [q ** (t - 1)]
    return s2 / 4 * float(np.sum(np.square(coef)))


@pytest.mark.parametrize("lam,eta,tau,t", [(1.0, 0.5, 0.3, 30), (1.0, 1.5, 0.3, 7),
                                           (0.2, 0.1, 5.0, 30)])
def test_ornstein_uhlenbeck_transient_leimkuhler_matthews(lam, eta, tau, t):
    # exact finite-t variance of the MA(1)-driven chain; it tends to τ/λ (no η in it)
    X, y, _ = problem(n=5)
    N = 100_000
    st = Stepper(X, y, N, lam=lam, eta=eta, seed=21, integrator="lm")
    theta = np.zeros((N, D_IN + 2))
    assert st.advance(theta, tau, 0, t, data_term=False) == 0
    want = _lm_ou_variance(lam, eta, tau, t)
    var = theta.var(axis=0)
    se = want * math.sqrt(2 / N)
    assert np.all(np.abs(var - want) < 5 * se), (var, want)
    assert np.all(np.abs(theta.mean(axis=0)) < 5 * math.sqrt(want / N))
    if eta * lam >= 0.5:   # Euler–Maruyama's value is excluded
        em = model.ou_stationary_variance(lam, eta, tau) * (1 - (1 - eta * lam) ** (2 * t))
        assert np.all(np.abs(var - em) > 5 * se)


@pytest.mark.parametrize("integrator", ["em", "lm"])
@pytest.mark.parametrize("N", [300, 1300])
def test_previous_residuals_and_sum_of_squares(integrator, N):
    """One full-batch call of k steps leaves in ``R_prev`` bitwise what a call of k - 1 steps
    leaves in ``R``; ``sum_sq`` is the particles' sum of squares (one block and several)."""
    X, y, theta = problem(N=N, seed=5)
    st = Stepper(X, y, N, lam=0.1, eta=0.05, seed=8, integrator=integrator)
    assert st.keeps_previous
    short = theta.copy()
    st.advance(short, 0.05, 0, 6)
    R_short = st.R.copy()
    full = theta.copy()
    st.advance(full, 0.05, 0, 7)
    assert np.array_equal(st.R_prev, R_short)
    assert st.sum_sq == pytest.approx(float(np.sum(full * full)), rel=1e-13)
    assert not Stepper(X, y, N, lam=0.1, eta=0.05, batch_size=3).keeps_previous


@pytest.mark.parametrize("where", [(5, 1), (600, 0), (42, 3)])
def test_non_finite_particles_are_reported(where):
    X, y, theta = problem()
    theta[where] = np.nan if where[1] != 3 else np.inf
    st = Stepper(X, y, len(theta), lam=0.1, eta=0.05, seed=1)
    assert st.advance(theta, 0.01, 0, 3) == 1


def test_divergence_is_reported():
    X, y, theta = problem(scale=30.0)
    st = Stepper(X, y, len(theta), lam=0.1, eta=50.0, seed=1)
    assert st.advance(theta * 10, 0.0, 0, 200) == 1


@pytest.mark.parametrize("act,sharp,cap", CASES[1:])
def test_kernel_activations_equal_reference(act, sharp, cap):
    z = np.concatenate([np.linspace(-60, 60, 2001), [-1e3, -1e-300, 0.0, 1e-300, 1e3]])
    kind = {"softplus": _activations.ACT_SOFTPLUS, "capped": _activations.ACT_CAPPED}[act]
    v, dv = np.empty_like(z), np.empty_like(z)
    _activations.activation_values(z, kind, _activations.activation_params(kind, sharp, cap), v, dv)
    s, ds = model.activation(act, sharp, cap)
    np.testing.assert_allclose(v, s(z), rtol=1e-14, atol=1e-300)
    # σ' in [0, 1]: absolute round-off (the reference's tanh form loses the far left tail)
    np.testing.assert_allclose(dv, ds(z), rtol=0, atol=1e-15)


def test_relu_gate_and_nan_propagation():
    z = np.array([-1.0, -0.0, 0.0, 1e-300, 2.0, np.nan])
    v, dv = np.empty_like(z), np.empty_like(z)
    _activations.activation_values(z, _activations.ACT_RELU, _activations.activation_params(0, 10.0, 3.0), v, dv)
    np.testing.assert_array_equal(v[:5], [0, 0, 0, 1e-300, 2.0])
    np.testing.assert_array_equal(dv[:5], [0, 0, 0, 1, 1])      # relu'(0) = 0
    assert np.isnan(v[5])


@pytest.mark.parametrize("sharp,cap", [(10.0, 3.0), (2.0, 0.7), (50.0, 1.5)])
def test_capped_activation_properties(sharp, cap):
    # THEORY §3: softplus up to z_m, C¹ junction, concave cap with |φ''| <= 1/m², sup = 2m²
    m2 = cap ** 2
    zm, sm = model.cap_junction(sharp, cap)
    assert abs(model.softplus(zm, sharp) - m2) < 1e-12 * m2
    assert abs(model.softplus_grad(zm, sharp) - sm) < 1e-14
    eps = 1e-7
    lo, hi = model.capped(zm - eps, sharp, cap), model.capped(zm + eps, sharp, cap)
    assert abs(hi - lo - 2 * eps * sm) < 1e-12
    assert abs(model.capped_grad(zm + eps, sharp, cap) - model.capped_grad(zm - eps, sharp, cap)) \
        < 1e-6
    z = np.linspace(zm + 1e-3, zm + 40 * m2, 20001)
    h = z[1] - z[0]
    phi = model.capped(z, sharp, cap)
    second = (phi[2:] - 2 * phi[1:-1] + phi[:-2]) / h ** 2
    assert np.all(second <= 1e-6) and np.all(-second <= 1 / m2 * (1 + 1e-4))
    assert np.all(np.diff(phi) >= 0) and np.all(np.diff(phi[z < zm + 10 * m2]) > 0)
    assert 2 * m2 * (1 - 1e-8) < phi[-1] <= 2 * m2        # saturates (to round-off)
    big = np.linspace(-50, 500, 1001)
    assert np.all(model.capped(big, sharp, cap) <= 2 * m2)
    np.testing.assert_allclose(model.capped(np.linspace(-50, zm, 101), sharp, cap),
                               model.softplus(np.linspace(-50, zm, 101), sharp), rtol=1e-15)


def test_capped_tends_to_relu():
    z = np.linspace(-5, 5, 1001)
    for t, m in ((1e2, 5.0), (1e3, 10.0)):
        assert np.max(np.abs(model.capped(z, t, m) - model.relu(z))) <= math.log(2) / t + 1e-12


def test_stepper_rejects_bad_arguments():
    X, y, theta = problem()
    with pytest.raises(ValueError, match="batch_size"):
        Stepper(X, y, 10, lam=0.1, eta=0.1, batch_size=len(y) + 1)
    with pytest.raises(ValueError, match="activation"):
        Stepper(X, y, 10, lam=0.1, eta=0.1, activation="tanh")
    with pytest.raises(ValueError, match="integrator"):
        Stepper(X, y, 10, lam=0.1, eta=0.1, integrator="rk4")
    st = Stepper(X, y, len(theta), lam=0.1, eta=0.1)
    with pytest.raises(ValueError, match="theta"):
        st.advance(theta[:, :3].copy(), 0.1, 0, 1)
    with pytest.raises(ValueError, match="steps"):
        st.advance(theta, 0.1, 2**31 - 2, 5)


# ---------------------------------------------------------------------------------------------
# The kernel with d at run time (dims = ()) and the compile-ahead
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("integrator", ["em", "lm"])
@pytest.mark.parametrize("act,sharp,cap", CASES)
def test_run_time_d_kernel_is_bitwise_the_specialised_one(act, sharp, cap, integrator):
    """The same operations in the same order: equal bits after many steps, with minibatches,
    a noiseless call and a block that is not full (N = 1300)."""
    X, y, theta = problem(N=1300, n=7, seed=6)
    out = []
    for dims in ((0,) * D_IN, ()):
        for B in (0, 3):
            st = Stepper(X, y, len(theta), lam=0.2, eta=0.05, activation=act, sharpness=sharp,
                         cap=cap, batch_size=B, seed=4, integrator=integrator)
            st.dims = dims
            th = theta.copy()
            assert st.advance(th, 0.03, 10, 15) == 0 and st.advance(th, 0.0, 25, 3) == 0
            out.append(th.tobytes() + st.f.tobytes() + st.R.tobytes())
    assert out[0] == out[2] and out[1] == out[3]
    assert out[0] != out[1]


@pytest.mark.parametrize("integrator", ["em", "lm"])
@pytest.mark.parametrize("act,sharp,cap", CASES)
def test_run_time_d_kernel_equals_reference_beyond_the_specialised_dims(act, sharp, cap,
                                                                         integrator):
    d = max(stepper_mod.SPECIALISED_DIMS) + 1
    rng = np.random.default_rng(7)
    X, y = rng.standard_normal((6, d)) / math.sqrt(d), rng.standard_normal(6)
    theta = rng.standard_normal((900, d + 2))
    st = Stepper(X, y, len(theta), lam=0.3, eta=0.05, activation=act, sharpness=sharp, cap=cap,
                 batch_size=4, seed=2, integrator=integrator)
    assert st.dims == ()
    want = theta.copy()
    for s in range(30, 33):
        want = reference_step(st, want, 0.02, s, act, sharp, cap)
    got = theta.copy()
    assert st.advance(got, 0.02, 30, 3) == 0
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    sigma, _ = model.activation(act, sharp, cap)
    np.testing.assert_allclose(st.R, model.residuals(want, X, y, sigma), rtol=0, atol=1e-13)


def test_kernel_dims_and_variants():
    spec = stepper_mod.SPECIALISED_DIMS
    for d in range(1, 9):
        want = (0,) * d if d in spec else ()
        assert stepper_mod.kernel_dims(d) == want
    kinds = stepper_mod.kernel_variants()
    assert kinds[:-1] == list(spec) and kinds[-1] not in spec       # one run-time kind
    X, y, theta = problem()
    assert Stepper(X, y, len(theta), lam=0.1, eta=0.1).dims == (0,) * D_IN


def test_prepare_compiles_once_and_leaves_the_particles():
    X, y, theta = problem()
    st = Stepper(X, y, len(theta), lam=0.1, eta=0.1)
    st.advance(theta.copy(), 0.1, 0, 1)           # compiled (or loaded) in this process
    before = theta.copy()
    assert st.prepare(theta, 5) is False          # nothing left to compile: no subprocesses
    assert np.array_equal(theta, before)


def test_compile_ahead_reports_failed_subprocesses_and_defers_to_a_holder_of_the_lock():
    root = os.path.dirname(os.path.dirname(os.path.abspath(stepper_mod.__file__)))
    # d = 2 is in the cache by now (the tests above): its subprocess loads it and succeeds;
    # d = -1 cannot be built and is reported
    assert stepper_mod._compile_in_subprocesses(root, [D_IN, -1], 2) == [-1]
    # while the lock is held (here, or by a run compiling ahead), nothing is started
    with stepper_mod._ahead_lock(root, "em", True):
        assert stepper_mod.compile_ahead([-1]) == []
        # one lock per integrator (and cache folder): the exact sampler's compile still runs
        assert stepper_mod.compile_ahead([-1], integrator="mala") == [-1]
    # cancelled while its subprocess still imports numba, it ends it before it can fail
    import threading
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    assert stepper_mod._compile_in_subprocesses(root, [-1], 1, cancel) == []


_FIRST_RUN = """
import sys, time
import numpy as np
import solvers.stepper as S
started = []
real = S.compile_in_background
S.compile_in_background = lambda *a, **k: started.append(real(*a, **k))
d, integrator = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
X, y, theta = rng.standard_normal((5, d)), rng.standard_normal(5), rng.standard_normal((16, d + 2))
st = S.Stepper(X, y, 16, lam=0.1, eta=0.1, integrator=integrator)
t0 = time.monotonic()
compiled = st.prepare(theta)
assert not started          # nothing in the background while the run steps
st.compile_others()         # what the run does when its stepping is done
print(int(compiled), round(time.monotonic() - t0, 2), len(started))
if started and started[0] is not None:
    started[0].wait()
"""


@pytest.mark.long
@pytest.mark.slow
def test_a_first_run_compiles_its_own_variant_and_the_next_dimension_compiles_nothing(tmp_path):
    """On an empty numba cache a ``"mala"`` run on 2-D data compiles its own kernel alone
    before stepping (Euler-Maruyama's kernels, which it does not need, are not compiled) and,
    once its stepping is done, starts the other input dimensions in the background; a run on
    1-D (or 3-D, or run-time d) data after it finds them in the cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), TMPDIR=str(tmp_path))

    def first_run(d, integrator):
        out = subprocess.run([sys.executable, "-c", _FIRST_RUN, str(d), integrator], env=env,
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        compiled, seconds, started = out.stdout.split()
        return compiled == "1", float(seconds), int(started)

    assert first_run(2, "mala")[0::2] == (True, 1)      # compiled, and started the others
    assert not list((tmp_path / "cache").rglob("*run_steps*"))     # no Euler kernel
    for d in (1, 3, stepper_mod.kernel_variants()[-1]):
        assert first_run(d, "mala")[0::2] == (False, 0)


def test_inline_helpers_accept_the_run_time_dims():
    """``_z`` (and through ``_ndim`` the other inlined block helpers) keep their signature and
    take ``dims = ()`` too: the same pre-activations, bitwise, as with a d-tuple, and
    ``b + w·x`` to round-off."""
    import numba

    @numba.njit
    def pre_activations(T, XT, dims):
        out = np.empty((T.shape[1], XT.shape[1]))
        for i in range(T.shape[1]):
            for j in range(XT.shape[1]):
                out[i, j] = kernels._z(T, i, XT, j, dims)
        return out, kernels._ndim(T, dims)

    rng = np.random.default_rng(3)
    T = rng.standard_normal((5, 40))               # d = 3
    XT = rng.standard_normal((3, 6))
    z_spec, d_spec = pre_activations(T, XT, (0, 0, 0))
    z_rt, d_rt = pre_activations(T, XT, ())
    assert d_spec == d_rt == 3
    assert z_spec.tobytes() == z_rt.tobytes()
    np.testing.assert_allclose(z_rt, T[1:4].T @ XT + T[4][:, None], rtol=0, atol=1e-13)


_RACE_MODULE = '''
import numba

@numba.njit(cache=True)
def scaled(x):
    return x * 3 + 1
'''

_RACE_CHILD = '''
import sys
sys.path.insert(0, sys.argv[1])
from solvers import _numba_cache
_numba_cache.install()
import racemod
import numpy as np
kind = sys.argv[2]
value = {"i": np.int64(2), "f": 2.5, "a": np.arange(3.0), "b": np.arange(3)}[kind]
out = racemod.scaled(value)
print(repr(np.asarray(out).tolist()))
'''


def test_processes_compiling_other_signatures_into_one_cache_never_share_a_data_file(tmp_path):
    """numba's save numbers a signature's data file from an index read without a lock; the
    cache patch locks it, so four processes compiling four signatures of one function at once
    leave an index whose every entry loads its own machine code (before the lock, a crossed
    entry crashed the next process with SIGSEGV)."""
    (tmp_path / "racemod.py").write_text(_RACE_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    want = {"i": "7", "f": "8.5", "a": "[1.0, 4.0, 7.0]", "b": "[1, 4, 7]"}

    def start(kind):
        return subprocess.Popen([sys.executable, "-c", _RACE_CHILD, str(tmp_path), kind],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    procs = {k: start(k) for k in want}                 # compiling at the same time
    for k, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == want[k], (k, p.returncode, err[-500:])
    for k in want:                                      # every entry loads its own code
        p = start(k)
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == want[k], (k, p.returncode, err[-500:])
