"""Private numba kernel of the Metropolis-adjusted particle sweep (``integrator = "mala"``).

The N-particle system of ``solvers._kernels`` is overdamped Langevin dynamics for one potential
(docs/theory.md, "Exact sampling of the N-particle law")::

    U(Θ) = N·R(Θ) + (λ/2) Σ_i |θ_i|²,   R(Θ) = (1/(2n)) Σ_j (f_Θ(x_j) − y_j)²,

so that ``−∇_{θ_i} U`` is exactly the drift of the Euler–Maruyama kernel (``R_j = (f_j − y_j)/n``
and the ``1/N`` of ``f`` cancel the ``N``), and its noise ``sqrt(2 η τ) ξ`` makes
``π_N ∝ exp(−U/τ)`` the law that Euler–Maruyama approximates as ``η → 0``. This kernel samples
``π_N`` exactly: one *pass* (one step of the step counter) visits the particles in the fixed
order ``i = 0, 1, …, N−1`` (systematic scan) and gives each one Metropolis–Hastings move with
the other particles held fixed. The move is

* with probability ``1 − jumps``: a Langevin (MALA) proposal ``θ' = θ − η g(θ) + sqrt(2ητ) ξ``,
  ``g = ∇_{θ_i} U``, accepted with probability
  ``min(1, exp(−ΔU/τ) q(θ | θ') / q(θ' | θ))``, ``q(b | a) ∝ exp(−|b − a + η g(a)|²/(4ητ))``;
* with probability ``jumps`` (and ``N ≥ 2``): a jump. ``K = JUMP_SUBSET`` other particles
  ``S = (o_1..o_K)`` are drawn uniformly with replacement among the ``N − 1`` others, one of
  them, ``o_m``, uniformly, and ``θ' = θ_{o_m} + s ξ`` with ``s² = τ/λ``; the proposal density
  ``q_S(x) = (1/K) Σ_k N(x; θ_{o_k}, s² I)`` depends on the other particles only, and the move
  is accepted with probability ``min(1, exp(−ΔU/τ) q_S(θ) / q_S(θ'))``.

A share ``fine`` of the Langevin moves is made at a *fine step*: ``η`` replaced by
``η FINE_RATIO^k``, ``k`` uniform in ``1..FINE_LEVELS`` (in the proposal and in both of its
densities). The step is drawn without looking at the state, so each step size is a
Metropolis–Hastings kernel of its own and the mixture keeps ``π_N``. It is for the stiff
coordinates of heavy particles: at low ``τ`` a heavy particle on a kink hyperplane of a data
point (or on two, at their intersection) is pinned across it within ``~τ/(λ|a||u|)``, far inside
the noise ``sqrt(2ητ)`` of a Langevin move, which is then always refused, so without fine
steps those coordinates keep the value the stage found them at (docs/theory.md §2.6).

After its move, with probability ``radial``, the particle gets a *radial move*: ``t = |θ|²``
is resampled along its direction ``ω = θ/|θ|`` (activation pattern and sign of ``a`` kept),
from a Gamma proposal fitted to the conditional law of ``t`` given ``ω`` and the other
particles, ``∝ t^m exp(−U(√t ω)/τ)``, ``m = (d+2)/2 − 1`` (:func:`_radial_law`,
:func:`_radial_proposal`), and accepted with the exact ratio of an independence sampler on that
conditional. The radial direction is the soft one at low ``τ``: along a ray ``U`` changes with
``t`` at the rate ``c(ω) → 0`` (docs/theory.md §6.5, §2.6), so Langevin moves relax it
only over ``~1/c`` units of time, a radial move in one.

With probability ``exchange`` (drawn without looking at the state), a pass ends with an
*exchange move* (:mod:`solvers._exchange`, ReLU only): the masses of the stiff activation
cells, the cells of the heavy particles, are resampled together, every direction and every
share within a cell kept: the split of the mass between rays, along which moves of one
particle walk slowly at low ``τ``.

Each move leaves ``π_N`` invariant (detailed balance of that Gibbs component), so do the
mixture over move types and subsets, whose draws do not look at the state, and the
composition over the scan.

``ΔU`` is incremental: with ``e_j = f_j − y_j`` and ``Δf_j = (a' σ(z'_j) − a σ(z_j))/N``,
``ΔU = (N/(2n)) Σ_j Δf_j (2 e_j + Δf_j) + (λ/2)(|θ'|² − |θ|²)``, ``O(n d)`` per move; an
accepted move adds ``Δf`` to ``e``. A Langevin move is two loops over the points, one at the
particle (its activations and the sums of its gradient, :func:`_current_terms`) and one at the
proposal (``Δf``, ``ΔU`` and the sums of the reverse gradient, :func:`_proposal_terms`); a
radial move of a ReLU particle needs no loop but the update of ``e`` (its law along ``ω`` comes
from the sums of the first). Every sum runs in the order of the points. At the start of every pass ``f`` is recomputed from the
particles with the block sums of ``solvers._kernels.forward`` (the same blocks in the same
order, so the same bits), so a pass is a function of the particles and the step index alone and
a run cut into calls anywhere is bitwise the run done in one piece. That sum runs on the
calling thread: it is ``O(N n d)``, a few per cent of a pass, and a parallel region per pass
made a pass up to 8 times slower when the other cores were busy (measured: plane8, N = 4000,
2 threads beside one busy process, 8.1 against 1.0 ms).

Random numbers come from the counter-based stream of ``solvers._rng``, with keys derived from
the seed beyond the two used there (SplitMix64 outputs 3..6):

* proposal normals of the Langevin move: the Euler–Maruyama noise itself, key ``k1``, position
  ``step·M + i (d+2) + c`` (a proposal that is always accepted is the Euler–Maruyama step, in the
  sequential order);
* uniforms, key ``k3``: position ``step·M + 3i`` chooses the move type, ``3i + 1`` accepts,
  ``3i + 2`` picks the jump centre among the subset;
* jump normals, key ``k4``, position ``step·M + i (d+2) + c``;
* subset members, key ``k5``, draw ``i K + k``;
* the radial move, key ``k6``: position ``step·M + 4i`` decides whether it is made,
  ``4i + 1`` chooses between its two proposals, ``4i + 2`` accepts, and the hash of ``4i + 3``
  starts the chain of the Gamma draw (:func:`_gamma`);
* the fine step, key ``k8`` (SplitMix64 output 8; 7 is the blocked pass's order): position
  ``step·M + 2i`` decides whether the Langevin move is fine, ``2i + 1`` draws ``k``;
* the exchange move, key ``k9`` (SplitMix64 output 9): position
  ``step·M + EXCHANGE_CELLS + 1`` decides whether the pass ends with one, the others are
  the move's own (:mod:`solvers._exchange`).
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np

from solvers._activations import ACT_RELU, _act_pair
from solvers._exchange import EXCHANGE_CELLS, exchange_key, exchange_move, exchange_workspace
from solvers._fma import _fma
from solvers._kernels import (
    BLOCK,
    _forward_block,
    _forward_block_rt,
    _ndim,
    _scaled_residuals,
)
from solvers._rng import (
    _GOLD,
    _below,
    _hash,
    _mix,
    _normal,
    _position,
    _seed_output,
    _uniform,
)

#: Other particles in the mixture of a jump proposal (bounds a jump at ``O(K d)``).
JUMP_SUBSET = 16
#: Mixture terms this far (in log) below the largest are left out of the proposal density.
MIXTURE_CUT = 60.0
#: Least probability of the wide radial proposal (:func:`_radial_proposal`).
RADIAL_WIDE = 0.1

#: A fine Langevin move's step is ``η FINE_RATIO^k``, ``k`` uniform in ``1..FINE_LEVELS``
#: (steps down to ``η/65536``, noise widths down to ``1/256`` of the move's).
FINE_RATIO = 1.0 / 16.0
FINE_LEVELS = 4

#: Entries of the move counters (``counts``), in order.
COUNTS = ("moves", "moves_accepted", "jumps", "jumps_accepted", "jumps_changed_cell",
          "radial_moves", "radial_accepted", "exchange_moves", "exchange_accepted")

@nb.njit(inline="always")
def _fine_key(seed):
    """The key ``k8`` of the fine Langevin moves' steps (SplitMix64 output 8 of the seed; 7
    is the blocked pass's order)."""
    return _seed_output(seed, 8)


@nb.njit(inline="always")
def _keys(seed):
    """The keys ``k1`` (noise, as in ``solvers._kernels``), ``k3``, ``k4``, ``k5``, ``k6``."""
    return (_seed_output(seed, 1), _seed_output(seed, 3), _seed_output(seed, 4),
            _seed_output(seed, 5), _seed_output(seed, 6))


@nb.njit(inline="always")
def _act(z, kind, p):
    """``(σ(z), σ'(z))``; ReLU inline (``σ'(0) = 0``)."""
    if kind == ACT_RELU:
        return (z, 1.0) if z > 0.0 else (0.0, 0.0)
    return _act_pair(z, kind, p)


@nb.njit(inline="always")
def _first_weights(th, d):
    """``(w_1, w_2, w_3, w_4)`` of the particle ``th`` (0 beyond ``d``): held in registers by
    the loops over the points; coordinates beyond the fourth are read from ``th``."""
    return (th[1], th[2] if d > 1 else 0.0, th[3] if d > 2 else 0.0,
            th[4] if d > 3 else 0.0)


@nb.njit(inline="always")
def _pre(th, XT, j, d, w0, w1, w2, w3):
    """Pre-activation ``z_j = b + Σ_k w_k x_jk`` (FMAs in the order of the coordinates, as
    ``solvers._kernels._z``)."""
    z = _fma(w0, XT[0, j], th[d + 1])
    if d > 1:
        z = _fma(w1, XT[1, j], z)
    if d > 2:
        z = _fma(w2, XT[2, j], z)
    if d > 3:
        z = _fma(w3, XT[3, j], z)
    for k in range(4, d):
        z = _fma(th[1 + k], XT[k, j], z)
    return z


@nb.njit(inline="always")
def _add_gradient_terms(hj, XT, j, d, g0, g1, g2, g3, gw):
    """``g_k += h_j x_jk`` for the coordinates ``k < 4`` (returned, so that they stay in
    registers) and ``gw[k] += h_j x_jk`` beyond."""
    g0 = _fma(hj, XT[0, j], g0)
    if d > 1:
        g1 = _fma(hj, XT[1, j], g1)
    if d > 2:
        g2 = _fma(hj, XT[2, j], g2)
    if d > 3:
        g3 = _fma(hj, XT[3, j], g3)
    for k in range(4, d):
        gw[k] = _fma(hj, XT[k, j], gw[k])
    return g0, g1, g2, g3


@nb.njit(inline="always")
def _store_gradient_terms(gw, d, g0, g1, g2, g3):
    """``gw[k] = g_k`` for the coordinates ``k < min(d, 4)``."""
    gw[0] = g0
    if d > 1:
        gw[1] = g1
    if d > 2:
        gw[2] = g2
    if d > 3:
        gw[3] = g3


@nb.njit(inline="always")
def _current_terms(th, XT, n, d, kind, p, e, z, s, gw):
    """One loop over the points for the particle ``th`` at the errors ``e``: its
    pre-activations ``z`` and activations ``s``, the sums of its gradient ``gw_k = Σ_j h_j
    x_jk`` (``h_j = e_j σ'(z_j)``), and ``(Σ_j e_j s_j, Σ_j h_j, Σ_j s_j²)``; every sum in the
    order of the points."""
    w0, w1, w2, w3 = _first_weights(th, d)
    sa = 0.0
    sb = 0.0
    sq = 0.0
    g0 = 0.0
    g1 = 0.0
    g2 = 0.0
    g3 = 0.0
    for k in range(4, d):
        gw[k] = 0.0
    for j in range(n):
        zz = _pre(th, XT, j, d, w0, w1, w2, w3)
        z[j] = zz
        sj, dsj = _act(zz, kind, p)
        s[j] = sj
        ej = e[j]
        hj = ej * dsj
        sa = _fma(ej, sj, sa)
        sb += hj
        sq = _fma(sj, sj, sq)
        g0, g1, g2, g3 = _add_gradient_terms(hj, XT, j, d, g0, g1, g2, g3, gw)
    _store_gradient_terms(gw, d, g0, g1, g2, g3)
    return sa, sb, sq


@nb.njit(inline="always")
def _proposal_terms(thp, a, XT, n, d, kind, p, inv_N, e, s, zp, sp, ep, grad, gw):
    """One loop over the points for the move of a particle (output weight ``a``,
    activations ``s``) to ``thp``: its pre-activations ``zp`` and activations ``sp``, the errors
    after the move ``ep = e + Δf`` (``Δf_j = (a' sp_j − a s_j)/N``), and
    ``(Σ_j Δf_j (2 e_j + Δf_j), Σ_j ep_j sp_j, Σ_j hp_j, Σ_j sp_j²)`` (``hp_j = ep_j σ'(zp_j)``)
    and, when ``grad``, ``gw_k = Σ_j hp_j x_jk``; every sum in the order of the points."""
    w0, w1, w2, w3 = _first_weights(thp, d)
    ap = thp[0]
    du = 0.0
    pa = 0.0
    pb = 0.0
    sq = 0.0
    g0 = 0.0
    g1 = 0.0
    g2 = 0.0
    g3 = 0.0
    if grad:
        for k in range(4, d):
            gw[k] = 0.0
    for j in range(n):
        zz = _pre(thp, XT, j, d, w0, w1, w2, w3)
        zp[j] = zz
        sj, dsj = _act(zz, kind, p)
        sp[j] = sj
        dfj = (ap * sj - a * s[j]) * inv_N
        ej = e[j]
        du = _fma(dfj, 2.0 * ej + dfj, du)
        epj = ej + dfj
        ep[j] = epj
        pa = _fma(epj, sj, pa)
        sq = _fma(sj, sj, sq)
        if grad:
            hj = epj * dsj
            pb += hj
            g0, g1, g2, g3 = _add_gradient_terms(hj, XT, j, d, g0, g1, g2, g3, gw)
    if grad:
        _store_gradient_terms(gw, d, g0, g1, g2, g3)
    return du, pa, pb, sq


@nb.njit(inline="always")
def _gradient(th, d, n, lam, sa, sb, gw, g):
    """``g = ∇_θ U`` of one particle from the sums of :func:`_current_terms` (or
    :func:`_proposal_terms`): ``g_a = Σ_j e_j s_j / n + λ a``, ``g_u = (a/n) Σ_j h_j x̃_j + λ u``."""
    inv_n = 1.0 / n
    a = th[0]
    an = a * inv_n
    g[0] = _fma(lam, a, sa * inv_n)
    g[d + 1] = _fma(an, sb, lam * th[d + 1])
    for k in range(d):
        g[1 + k] = _fma(an, gw[k], lam * th[1 + k])


@nb.njit(inline="always")
def _log_mixture(x, T, sub, K, D, inv2s2, buf):
    """``log Σ_k exp(−|x − θ_{sub_k}|² / (2 s²))`` (``inv2s2 = 1/(2 s²)``), stably; terms
    more than ``MIXTURE_CUT`` below the largest are dropped (each is below e^-60 of it)."""
    best = -math.inf
    for k in range(K):
        o = sub[k]
        q = 0.0
        for c in range(D):
            dv = x[c] - T[c, o]
            q = _fma(dv, dv, q)
        v = -q * inv2s2
        buf[k] = v
        if v > best:
            best = v
    acc = 0.0
    for k in range(K):
        t = buf[k] - best
        if t > -MIXTURE_CUT:
            acc += math.exp(t)
    return best + math.log(acc)


@nb.njit(inline="always")
def _gamma(h, shape):
    """Gamma(``shape``, 1) variate, ``shape >= 1`` (Marsaglia & Tsang, ACM TOMS 26(3), 2000,
    with their squeeze), from the hash chain ``_mix(h + t γ)``, ``t = 1, 2, …`` (a pure
    function of ``h``)."""
    dd = shape - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * dd)
    t = np.uint64(1)
    while True:
        x = _normal(h, t)
        t += np.uint64(1)
        v = 1.0 + c * x
        if v <= 0.0:
            continue
        v = v * v * v
        u = _uniform(_mix(h + t * _GOLD))
        t += np.uint64(1)
        x2 = x * x
        if u < 1.0 - 0.0331 * x2 * x2 or \
                math.log(u) < 0.5 * x2 + dd - dd * v + dd * math.log(v):
            return dd * v


@nb.njit(inline="always")
def _radial_law(th, n, N, kind, p, inv_N, lam, e, z, s, sa, sq, data_term):
    """``(t, A, B)`` of the law of ``t = |θ|²`` along the particle's direction
    ``ω = θ/|θ|``, the other particles fixed: ``∝ t^m exp(−(A t + B t²)/τ)`` for ReLU.

    ``z``, ``s`` are the particle's pre-activations and activations, ``e`` the errors with
    it, ``sa = Σ_j e_j s_j``, ``sq = Σ_j s_j²``. ``A = ⟨e_{−i}, φ(ω)⟩/n + λ/2``,
    ``B = |φ(ω)|²/(2nN)`` with ``φ_j(ω) = ω_a σ(ω_u·x̃_j)`` and ``e_{−i}`` the errors without
    the particle: functions of ``ω`` and the other particles only. For ReLU ``φ(ω) = a s/t``
    (2-homogeneity), so they come from ``sa`` and ``sq``; for other activations they are
    those of ``σ(ω_u·x̃)`` (a loop over the points), which then only shape the proposal."""
    tt = 0.0
    for c in range(th.shape[0]):
        tt += th[c] * th[c]
    A = 0.5 * lam
    B = 0.0
    if not (data_term and tt > 0.0):
        return tt, A, B
    a = th[0]
    if kind == ACT_RELU:
        inv_t = 1.0 / tt
        P2 = a * a * sq
        A += (a * sa - P2 * inv_N) * inv_t / n
        B = P2 * inv_t * inv_t / (2.0 * n * N)
        return tt, A, B
    inv_rt = 1.0 / math.sqrt(tt)
    aw = a * inv_rt
    ai = a * inv_N
    P1 = 0.0
    P2 = 0.0
    for j in range(n):
        sw, _ = _act(z[j] * inv_rt, kind, p)
        fw = aw * sw
        P1 = _fma(e[j] - ai * s[j], fw, P1)
        P2 = _fma(fw, fw, P2)
    return tt, A + P1 / n, P2 / (2.0 * n * N)


@nb.njit(inline="always")
def _radial_proposal(A, B, m, tau, h_kind, h_gamma):
    """``(t', κ', 1/scale)``: a draw of a radial proposal Gamma(``m + 1 + κ'``,
    ``t*/(m + κ')``) for the law ``∝ t^m exp(−(A t + B t²)/τ)``, ``t*`` its mode (the positive
    root of ``2Bt² + At − mτ = 0``); ``t' = 0`` when the law has no finite mode.

    Two proposals, each the whole proposal of its Metropolis–Hastings kernel, chosen with
    probabilities that depend on ``A, B`` alone (functions of the direction and the other
    particles, which a radial move keeps; so the mixture of the two kernels leaves the law
    invariant): with ``κ = 2Bt*²/τ``, ``κ' = κ`` (the curvature of ``log p`` at ``t*`` matched:
    the efficient one) with probability ``1 − w``, and ``κ' = 0`` with probability
    ``w = max(RADIAL_WIDE, 1/(1 + κ))``, whose density ratio ``p/q ∝ exp(−B(t − t*)²/τ)`` is
    bounded, so that a particle far from ``t*``, where the first one's ratio is not, is moved.
    ``B = 0``: both are the law itself, Gamma(``m + 1``, ``τ/A``)."""
    disc = math.sqrt(A * A + 8.0 * B * m * tau)
    if A >= 0.0 and A + disc > 0.0:
        tstar = 2.0 * m * tau / (A + disc)
    elif A < 0.0 and B > 0.0:
        tstar = (disc - A) / (4.0 * B)
    else:                   # A ≤ 0 and B = 0 (B underflowed): no finite mode, no move
        return 0.0, 0.0, 0.0
    if not (tstar > 0.0 and tstar < math.inf):
        return 0.0, 0.0, 0.0
    kap = 2.0 * B * tstar * tstar / tau
    if _uniform(h_kind) * (1.0 + kap) < max(RADIAL_WIDE * (1.0 + kap), 1.0):
        kap = 0.0
    inv_s = (m + kap) / tstar
    tn = _gamma(h_gamma, m + 1.0 + kap) / inv_s
    if not (tn > 0.0 and tn < math.inf):
        return 0.0, 0.0, 0.0
    return tn, kap, inv_s


@nb.njit(inline="always")
def _forward_serial(T, XT, n, partial, scratch, kind, p, dims):
    """``solvers._kernels.forward`` on the calling thread (block by block, the same bits);
    ``dims = ()``: ``d`` at run time, as there."""
    N = T.shape[1]
    d = _ndim(T, dims)
    zoff = np.uint64((2 * d + 4) * BLOCK)
    for blk in range((N + BLOCK - 1) // BLOCK):
        lo = np.uint64(blk * BLOCK)
        m = np.uint64(min(BLOCK, N - blk * BLOCK))
        if len(dims) == 0:
            _forward_block_rt(T, lo, m, XT, n, partial, blk, scratch, 0, zoff, kind, p)
        else:
            _forward_block(T, lo, m, XT, n, partial, blk, scratch, 0, zoff, kind, p, dims)



@nb.njit(cache=True, nogil=True)     # chains step in parallel threads (solvers.langevin)
def mala_steps(T, X, y, XT, partial, scratch, sub, f, R, counts, f_sum, lam, eta, tau,
               seed, step0, nsteps, kind, p, data_term, jumps, radial, fine, dims, relu,
               exchange=0.0):
    """Advance ``nsteps`` Metropolis-adjusted passes from global step ``step0``.

    Parameters
    ----------
    T : ndarray (d+2, N)
        Particles in the column layout of ``solvers._kernels``, updated in place.
    X, y : ndarray (n, d), (n,)
        Training set; ``XT`` (d, n) its transpose (for ``forward``).
    partial, scratch : ndarray
        Work space of ``solvers._kernels.forward``: ``(ceil(N/BLOCK), n)`` and
        :func:`solvers._kernels.scratch_shape`.
    sub : int64 ndarray (JUMP_SUBSET,)
        Work space.
    f, R : ndarray (n,)
        Out: predictor and scaled residuals ``(f − y)/n`` after the last pass.
    counts : int64 ndarray (9,)
        Move counters, incremented (:data:`COUNTS`).
    f_sum : ndarray (n,)
        The predictor after each pass is added to it.
    lam, eta, tau : float
        ``λ``, ``η``, ``τ > 0`` (with ``nsteps = 0`` any ``τ``).
    seed, step0, nsteps : int
    kind : int; p : ndarray (4,)
        Activation code and ``solvers._activations.activation_params``.
    data_term : bool
        False drops the data term of ``U`` (pure Gaussian target; for tests).
    jumps : float
        Share of jump moves in ``[0, 1]``.
    radial : float
        Probability of a radial move after each particle's move, in ``[0, 1]``.
    fine : float
        Share of the Langevin moves made at a fine step (:data:`FINE_RATIO`), in ``[0, 1]``.
    exchange : float
        Probability that a pass ends with an exchange move of the stiff activation cells'
        masses (``solvers._exchange``), in ``[0, 1]``; ReLU with the data term only (ignored
        otherwise).
    dims : tuple
        ``()`` (``d = T.shape[0] - 2`` at run time: one compile for every input dimension) or
        a d-tuple (specialised: the loops over the coordinates unrolled, faster; bitwise the
        same results). :class:`solvers.stepper.Stepper` passes
        :func:`solvers.stepper.kernel_dims`.
    relu : tuple
        ``(0,)``: compiled for ReLU alone (``kind`` is then ignored; the branches of the other
        activations left out of the loops over the points, about 1.8 times faster); ``()``:
        the activation ``kind`` at run time. Both give the same bits for ReLU.

    Returns
    -------
    int
        0, or 1 if a non-finite residual appeared (``T`` is left at the start of that pass).
    """
    N = T.shape[1]
    n = X.shape[0]
    d = _ndim(T, dims)
    D = d + 2
    if len(relu) == 0:      # pruned at compile time (a tuple's length is part of its type)
        act = kind
    else:
        act = ACT_RELU
    k1, k3, k4, k5, k6 = _keys(seed)
    sd = math.sqrt(2.0 * eta * tau)
    inv4 = 1.0 / (4.0 * eta * tau) if tau > 0.0 else 0.0
    s_jump = math.sqrt(tau / lam)
    inv2s2 = 0.5 * lam / tau if tau > 0.0 else 0.0
    K = sub.shape[0]
    # the particle's terms at its state (z, s), after a proposed move (zp, sp) and the errors
    # with it (e) and after the move (ep): copied when a move is accepted (rebinding the
    # arrays instead costs reference counts, measured slower)
    e = np.empty(n)
    ep = np.empty(n)
    z = np.empty(n)
    zp = np.empty(n)
    s = np.empty(n)
    sp = np.empty(n)
    gw = np.empty(d)
    inv_N = 1.0 / N
    th = np.empty(D)
    mbuf = np.empty(K)
    thp = np.empty(D)
    g = np.empty(D)
    gp = np.empty(D)
    can_jump = jumps > 0.0 and N >= 2
    do_radial = radial > 0.0
    do_fine = fine > 0.0
    k8 = _fine_key(seed)
    m_rad = 0.5 * D - 1.0
    do_exchange = exchange > 0.0 and data_term and act == ACT_RELU
    k9 = exchange_key(seed)
    ws = exchange_workspace(n, N, EXCHANGE_CELLS) if do_exchange else \
        exchange_workspace(n, 0, 0)       # a call without the move allocates nothing to speak of
    for st in range(nsteps + 1):
        # the predictor of the particles as they are, in the fixed block order
        _forward_serial(T, XT, n, partial, scratch, act, p, dims)
        for j in range(n):
            acc = 0.0
            for blk in range(partial.shape[0]):
                acc += partial[blk, j]
            f[j] = acc / N
            e[j] = f[j] - y[j]
            if st > 0:
                f_sum[j] += f[j]
            if not np.isfinite(e[j]):
                for jj in range(n):
                    R[jj] = (f[jj] - y[jj]) / n
                return 1
        if st == nsteps:
            break
        step = step0 + st
        for i in range(N):
            for c in range(D):
                th[c] = T[c, i]
            jump = False
            if can_jump:        # the move type's draw is made only when it can matter
                jump = _uniform(_hash(k3, _position(step, 3 * i))) < jumps
            sa = 0.0
            sb = 0.0
            sq = 0.0
            if data_term:
                sa, sb, sq = _current_terms(th, XT, n, d, act, p, e, z, s, gw)
            if jump:
                for k in range(K):
                    o = _below(k5, step, i * K + k, N - 1)
                    sub[k] = o + 1 if o >= i else o
                mm = _below(k3, step, 3 * i + 2, K)
                c0 = sub[mm]
                for c in range(D):
                    thp[c] = T[c, c0] + s_jump * _normal(k4, _position(step, i * D + c))
            else:
                if data_term:
                    _gradient(th, d, n, lam, sa, sb, gw, g)
                else:
                    for c in range(D):
                        g[c] = lam * th[c]
                etak = eta
                sdk = sd
                inv4k = inv4
                if do_fine and _uniform(_hash(k8, _position(step, 2 * i))) < fine:
                    etak = eta * FINE_RATIO ** (1 + _below(k8, step, 2 * i + 1, FINE_LEVELS))
                    sdk = math.sqrt(2.0 * etak * tau)
                    inv4k = 1.0 / (4.0 * etak * tau)
                for c in range(D):
                    thp[c] = th[c] - etak * g[c] + sdk * _normal(k1, _position(step, i * D + c))
            du = 0.0
            pa = 0.0
            pb = 0.0
            sqp = 0.0
            if data_term:
                du, pa, pb, sqp = _proposal_terms(thp, th[0], XT, n, d, act, p, inv_N, e, s,
                                                  zp, sp, ep, not jump, gw)
                du *= N / (2.0 * n)
            nq = 0.0
            for c in range(D):
                nq += (thp[c] - th[c]) * (thp[c] + th[c])
            du = du + 0.5 * lam * nq
            if jump:
                log_a = -du / tau + (_log_mixture(th, T, sub, K, D, inv2s2, mbuf)
                                     - _log_mixture(thp, T, sub, K, D, inv2s2, mbuf))
            else:
                if data_term:
                    _gradient(thp, d, n, lam, pa, pb, gw, gp)
                else:
                    for c in range(D):
                        gp[c] = lam * thp[c]
                fwd = 0.0
                bwd = 0.0
                for c in range(D):
                    r = thp[c] - th[c] + etak * g[c]
                    fwd += r * r
                    r = th[c] - thp[c] + etak * gp[c]
                    bwd += r * r
                log_a = -du / tau - (bwd - fwd) * inv4k
            # log u < 0 <= log_a: accepted without the uniform's logarithm (the same verdict;
            # False for a NaN log_a either way)
            ok = log_a >= 0.0 or \
                math.log(_uniform(_hash(k3, _position(step, 3 * i + 1)))) < log_a
            if jump:
                counts[2] += 1
            else:
                counts[0] += 1
            if ok:
                for c in range(D):
                    T[c, i] = thp[c]
                    th[c] = thp[c]
                if jump:
                    counts[3] += 1
                    if data_term:
                        for j in range(n):
                            if (z[j] > 0.0) != (zp[j] > 0.0):
                                counts[4] += 1
                                break
                else:
                    counts[1] += 1
                if data_term:       # the state after the move: its terms are those computed
                    for j in range(n):
                        e[j] = ep[j]
                        s[j] = sp[j]
                        z[j] = zp[j]
                    sa = pa
                    sq = sqp
            if do_radial and (radial >= 1.0 or                # drawn only when it matters
                              _uniform(_hash(k6, _position(step, 4 * i))) < radial):
                counts[5] += 1
                tt, A, B = _radial_law(th, n, N, act, p, inv_N, lam, e, z, s, sa, sq,
                                       data_term)
                tn, kap, inv_s = _radial_proposal(A, B, m_rad, tau,
                                                  _hash(k6, _position(step, 4 * i + 1)),
                                                  _hash(k6, _position(step, 4 * i + 3)))
                if tt > 0.0 and tn > 0.0:
                    rho2 = tn / tt
                    rho = math.sqrt(rho2)
                    if act == ACT_RELU or not data_term:
                        du = (tn - tt) * A + (tn * tn - tt * tt) * B
                    else:
                        for c in range(D):
                            thp[c] = rho * th[c]
                        du, _, _, _ = _proposal_terms(thp, th[0], XT, n, d, act, p, inv_N, e,
                                                      s, zp, sp, ep, False, gw)
                        du = du * (N / (2.0 * n)) + 0.5 * lam * (tn - tt)
                    # (t'/t)^m q(t)/q(t') of the Gamma(m + 1 + κ', t*/(m + κ')) proposal
                    log_a = -du / tau + (tn - tt) * inv_s
                    if kap > 0.0:
                        log_a -= kap * math.log(rho2)
                    if log_a >= 0.0 or \
                            math.log(_uniform(_hash(k6, _position(step, 4 * i + 2)))) < log_a:
                        counts[6] += 1
                        for c in range(D):
                            T[c, i] = rho * th[c]
                        if data_term:
                            if act == ACT_RELU:
                                gr = (rho2 - 1.0) * th[0] * inv_N
                                for j in range(n):
                                    e[j] = _fma(gr, s[j], e[j])
                            else:
                                for j in range(n):
                                    e[j] = ep[j]
        if do_exchange and (exchange >= 1.0 or _uniform(
                _hash(k9, _position(step, EXCHANGE_CELLS + 1))) < exchange):
            made, took = exchange_move(T, XT, e, lam, tau, k9, step, m_rad, ws)
            counts[7] += made
            counts[8] += took
    return 0 if _scaled_residuals(f, y, R) else 1
