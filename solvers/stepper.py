"""Python front end of the tuned Langevin kernels (``solvers._kernels``, ``solvers._mala``).

:class:`Stepper` owns the work space of one run (allocated once) and advances particles by
whole chunks of Euler–Maruyama (``"em"``) or Leimkuhler–Matthews (``"lm"``) steps
(THEORY §2), or of Metropolis-adjusted passes (``"mala"``, exact for the N-particle law
``π_N ∝ exp(−U/τ)``; ``solvers._mala``)::

    em:  θ_i ← θ_i − η ∇_θ Ψ(θ_i; ρ̂_N) + sqrt(2 η τ) ξ_i(k),
    lm:  θ_i ← θ_i − η ∇_θ Ψ(θ_i; ρ̂_N) + sqrt(2 η τ) (ξ_i(k) + ξ_i(k+1)) / 2,

full batch or noisy minibatch SGD, with the noise ``ξ`` a pure function of
``(seed, step, particle, coordinate)``; results do not depend on the number of threads
(``numba.set_num_threads``) nor on how a run is cut into calls of :meth:`Stepper.advance`.

Memory: the particles in column layout ``(d+2) N``, block partial sums ``⌈N/512⌉ n`` and a
per-thread scratch of ``(2d+4)·512 + n`` doubles, i.e. ``O(N (d+2) + N n / 512)`` floats.

Compilation. The kernels come in two kinds (``solvers._kernels``): specialised for one input
dimension ``d`` (the loops over coordinates unrolled at compile time), used for ``d`` in
:data:`SPECIALISED_DIMS`, where they were measured faster (``benchmarks/bench_dims.py``), and
one kernel for every other ``d`` (read at run time). The two give bitwise equal results. numba
caches every compiled kernel on disk. :meth:`Stepper.prepare` compiles only the kernel variant
the run needs (its integrator, activation kind and ``d``) and starts stepping; when that was a
first compile, the run calls :meth:`Stepper.compile_others` when its stepping is done: one
detached subprocess at the lowest CPU priority compiles the same integrator's other kinds
(:func:`compile_in_background`), so that a later run on data of another ``d`` loads them from
the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from solvers import _activations, _mala, _mala_block, _rng
from solvers import _kernels as kernels
from solvers.integrators import INTEGRATORS, integrator_named
from solvers.limits import (
    ACT_CODES,
    DEFAULT_EXCHANGE,
    DEFAULT_FINE,
    DEFAULT_JUMPS,
    DEFAULT_RADIAL,
    MAX_DRAWS,
)

__all__ = ["ACT_CODES", "DEFAULT_JUMPS", "DEFAULT_RADIAL", "INTEGRATORS", "SPECIALISED_DIMS",
           "Stepper", "compile_ahead", "compile_in_background", "compile_variant", "kernel_dims",
           "kernel_variants"]

#: Input dimensions ``d`` with kernels specialised per ``d`` (measured 1.3-1.8x faster per step
#: than the run-time kernel; 1.06x at d = 5); every other ``d`` shares the kernels that read ``d``
#: at run time. See benchmarks/README.md ("Compile time and input dimension").
SPECIALISED_DIMS = (1, 2, 3, 4)


def kernel_dims(d: int) -> tuple:
    """The ``dims`` argument of the kernels for input dimension ``d``: a ``d``-tuple for a
    specialised kernel (``d`` in :data:`SPECIALISED_DIMS`), else ``()`` (``d`` at run time)."""
    return (0,) * d if d in SPECIALISED_DIMS else ()


def kernel_variants() -> list[int]:
    """One input dimension per compiled kind of kernel: each specialised ``d``, then one ``d``
    served by the run-time kernels."""
    return [*SPECIALISED_DIMS, max(SPECIALISED_DIMS) + 1]


def compile_variant(d: int, integrator: str = "em", relu: bool = True) -> None:
    """Compile (or load from numba's cache) every kernel a step of ``integrator`` on
    ``d``-dimensional data uses, by one step of a tiny problem.

    Parameters
    ----------
    d : int
        Input dimension (see :func:`kernel_variants`).
    integrator : {"em", "lm", "mala"}
        The integrator (``"em"`` and ``"lm"`` share their kernels).
    relu : bool
        ``"mala"`` only: the kernel compiled for ReLU alone (True), or the one that reads the
        activation at run time (False).
    """
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((3, d)), rng.standard_normal(3)
    theta = rng.standard_normal((8, d + 2))
    Stepper(X, y, 8, lam=0.1, eta=0.01, integrator=integrator,
            activation="relu" if relu else "softplus").advance(theta, 0.01, 0, 1)


_CHILD = ("import sys\nfrom solvers.stepper import compile_variant\n"
          "compile_variant(int(sys.argv[1]), sys.argv[2], sys.argv[3] == '1')")

#: The detached compiler of :func:`compile_in_background`: in a process group of its own (an
#: interrupt typed at the terminal does not reach it) but the run's session, so that its
#: lowest CPU priority counts against the run's threads (the kernel's autogroup scheduler
#: weighs each session as a whole: in a session of its own, ``nice 19`` took a third of the
#: two cores from the run, measured), it takes the installation's compile-ahead lock (or leaves
#: at once when another process holds it) and compiles the variants one after the other.
_BACKGROUND = """\
import os, sys
try:
    os.setpgid(0, 0)
    os.nice(19)
except (AttributeError, OSError):
    pass
from solvers.stepper import _ahead_lock, compile_variant
root, integrator, relu = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
with _ahead_lock(root, integrator, relu) as mine:
    if mine:
        for d in sys.argv[4:]:
            compile_variant(int(d), integrator, relu)
"""


def _root() -> str:
    """The folder that holds this ``solvers`` package."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child_env(root: str) -> dict:
    """The environment of a compiling subprocess: this ``solvers`` first on its path, the
    current folder not on it."""
    return dict(os.environ, PYTHONSAFEPATH="1",
                PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH"))
                                           if p))


def compile_ahead(ds, jobs=None, cancel=None, *, integrator="em", relu=True) -> list[int]:
    """Compile the kernels of ``integrator`` for each input dimension of ``ds`` in
    subprocesses, ``jobs`` at a time (default: the number of CPUs; numba compiles on one
    thread), and wait for them.

    The subprocesses import this very ``solvers`` package (its folder first on their
    ``PYTHONPATH``, the current folder not on their path), so they fill the numba cache that
    this installation's later runs read. Interrupting the wait ends them. One process at a
    time compiles ahead for an installation (a lock file in the temporary folder): when another
    one holds the lock (the parallel jobs of a sweep starting together), this returns at once.

    Parameters
    ----------
    ds : iterable of int
        Input dimensions (see :func:`kernel_variants`).
    jobs : int, optional
        Subprocesses at a time, ``>= 1``.
    cancel : threading.Event, optional
        When set, the subprocesses still running are ended and this returns.
    integrator : {"em", "lm", "mala"}
        Whose kernels.
    relu : bool
        ``"mala"`` only: the ReLU kernel, or the one reading the activation at run time.

    Returns
    -------
    list of int
        The dimensions whose subprocess failed (their kernels then compile on first use).
    """
    root = _root()
    with _ahead_lock(root, integrator, relu) as mine:
        if not mine:
            return []
        return _compile_in_subprocesses(root, [int(d) for d in ds], jobs, cancel,
                                        integrator=integrator, relu=relu)


def compile_in_background(ds, *, integrator="em", relu=True):
    """Start one detached subprocess, at the lowest CPU priority, that compiles the kernels of
    ``integrator`` for each input dimension of ``ds`` into numba's cache, and return at once.

    A run calls this (:meth:`Stepper.compile_others`) when its stepping is done, after its own
    kernel's first compile: the other input dimensions are then in the cache for the next run
    (the subprocess runs at ``nice 19`` and goes on after the run ends). It runs in a process
    group of its own (an interrupt of the run does not reach it) and leaves at once when
    another process compiles the same integrator ahead for this installation and cache.

    Parameters
    ----------
    ds : iterable of int
        Input dimensions (see :func:`kernel_variants`).
    integrator : {"em", "lm", "mala"}
        Whose kernels.
    relu : bool
        ``"mala"`` only: the ReLU kernel, or the one reading the activation at run time.

    Returns
    -------
    subprocess.Popen or None
        The subprocess, or None when nothing was to do or it could not be started (the
        kernels then compile on first use).
    """
    ds = [str(int(d)) for d in ds]
    if not ds:
        return None
    root = _root()
    try:
        return subprocess.Popen([sys.executable, "-c", _BACKGROUND, root, integrator,
                                 "1" if relu else "0", *ds], env=_child_env(root),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:                          # no process to spare: compile on first use
        return None


@contextlib.contextmanager
def _ahead_lock(root, integrator="", relu=True):
    """Yield True when this process holds the compile-ahead lock of the installation at
    ``root`` for ``integrator``'s kernels in the current numba cache folder
    (``NUMBA_CACHE_DIR``), False when another process holds it (no lock on systems without
    ``fcntl``). One lock per installation, integrator, activation kind and cache folder: a
    background compile of one never keeps another from starting."""
    try:
        import fcntl
    except ImportError:                      # pragma: no cover - not POSIX
        yield True
        return
    what = "\0".join([root, str(integrator), str(bool(relu)),
                       os.environ.get("NUMBA_CACHE_DIR", "")])
    key = hashlib.sha256(what.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"meanfield-compile-{key}.lock")
    try:
        fh = open(path, "a")
    except OSError:
        yield True
        return
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _compile_in_subprocesses(root, todo, jobs, cancel=None, *, integrator="em", relu=True):
    """:func:`compile_variant` of each ``d`` in ``todo`` in a subprocess importing ``solvers``
    from ``root``, ``jobs`` at a time, until done or ``cancel`` is set; returns the ``d`` whose
    subprocess failed."""
    env = _child_env(root)
    jobs = max(1, int(jobs or os.cpu_count() or 1))
    running: list[tuple[int, subprocess.Popen]] = []
    failed = []
    try:
        while (todo or running) and not (cancel is not None and cancel.is_set()):
            while todo and len(running) < jobs:
                d = todo.pop(0)
                proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(d), integrator,
                                         "1" if relu else "0"], env=env,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                running.append((d, proc))
            time.sleep(0.1)
            for d, proc in list(running):
                code = proc.poll()
                if code is not None:
                    running.remove((d, proc))
                    if code != 0:
                        failed.append(d)
    finally:
        for _, proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return failed


def _compiles() -> int:
    """How many signatures of the step drivers this process compiled (numba cache misses)."""
    return sum(sum(k.stats.cache_misses.values())
               for k in (kernels.run_steps, _mala.mala_steps, _mala_block.mala_block_steps))


class Stepper:
    """Tuned particle stepper for one data set and one set of dynamics parameters.

    Parameters
    ----------
    X : ndarray of shape (n, d)
        Training inputs.
    y : ndarray of shape (n,)
        Training labels.
    n_particles : int
        Number of particles ``N``.
    lam : float
        Weight decay ``λ > 0`` on all of ``(a, w, b)``.
    eta : float
        Step size ``η`` (mean-field time per step).
    activation : {"relu", "softplus", "capped"}
        ``σ``; ``"capped"`` is the bounded ``σ_{m,t}`` of THEORY §3 (see
        :func:`solvers.numpy_model.capped`).
    sharpness : float
        Softplus sharpness ``t`` (softplus and capped).
    cap : float
        Cap parameter ``m`` of ``σ_{m,t}`` (the activation saturates at ``2 m²``).
    batch_size : int
        ``0`` for full batch; ``1 <= B <= n`` for minibatches of ``B`` distinct points drawn
        uniformly at every step, the data term estimated unbiasedly by ``(n/B) Σ_{j∈batch}``.
    seed : int
        Key of the noise and minibatch streams, ``0 <= seed < 2**63``.
    integrator : {"em", "lm"}
        Euler–Maruyama, or Leimkuhler–Matthews (same drift, the noise of steps ``k`` and
        ``k+1`` averaged; Leimkuhler & Matthews, Appl. Math. Res. Express 2013). Both draw
        ``ξ(k)`` from the same keyed stream, so ``"lm"`` needs no state beyond the particles:
        a call at step ``k`` with temperature ``τ`` adds ``sqrt(2ητ)(ξ(k) + ξ(k+1))/2``. At a
        temperature change the shared draw ``ξ(k+1)`` thus enters with half the old and half
        the new amplitude (one step's noise off by ``O(|sqrt τ_new − sqrt τ_old|)``, forgotten
        within the new stage's relaxation time).
        ``"mala"``: one step is one systematic-scan pass of Metropolis–Hastings moves, one per
        particle in the order ``0..N−1``: a Langevin proposal at step ``η`` or (share
        ``jumps``) a jump near another particle, then (probability ``radial``) a radial move
        of ``|θ_i|``, each accepted with the exact ratio of ``π_N ∝ exp(−U/τ)``
        (``solvers._mala``). Full batch only.
    jumps : float
        ``"mala"`` only: the share of jump moves, in ``[0, 1]`` (0: Langevin moves only;
        default :data:`solvers.limits.DEFAULT_JUMPS`).
    radial : float
        ``"mala"`` only: the probability that a particle's move is followed by a radial move,
        a Metropolis–Hastings move of ``|θ_i|`` along the particle's direction from a
        proposal fitted to its conditional law (``solvers._mala``), in ``[0, 1]`` (0: none;
        default :data:`solvers.limits.DEFAULT_RADIAL`).
    fine : float
        ``"mala"`` only: the share of the Langevin moves made at a fine step ``η/16^k``,
        ``k`` uniform in ``1..4`` (``solvers._mala``; for the stiff coordinates of heavy
        particles pinned on kinks at low ``τ``, docs/theory.md §2.6), in ``[0, 1]`` (default
        :data:`solvers.limits.DEFAULT_FINE`). The sequential pass only (``block`` below 2).
    exchange : float
        ``"mala"`` only: the probability that a pass ends with an exchange move, which
        resamples the masses of the heavy particles cell by cell together
        (``solvers._exchange``; for the slow split of the mass between rays at low ``τ``,
        docs/theory.md §2.6), in ``[0, 1]`` (default :data:`solvers.limits.DEFAULT_EXCHANGE`).
        ReLU and the sequential pass only.
    block : int
        ``"mala"`` only: ``2 <= b <= 1024`` runs the *blocked* pass
        (``solvers._mala_block.mala_block_steps``, docs/theory.md §2.6): the particles in rounds
        of ``b`` in an order drawn afresh each pass, every proposal of a round computed at once
        from the errors without the round's members processed before it, then the acceptances
        in order against the current errors; the same law ``π_N``, another chain (one compile
        per ``b`` rounded up to a multiple of four). ``0`` or ``1`` (default): the sequential
        pass.

    Attributes
    ----------
    f : ndarray of shape (n,)
        Predictor on all training points after the last :meth:`advance`.
    R : ndarray of shape (n,)
        Scaled residuals ``(f − y)/n`` on all training points after the last :meth:`advance`.
    sum_sq : float
        ``Σ_i |θ_i|²`` of the particles after the last :meth:`advance` (``nan`` or ``inf``
        when they are not finite or their squares overflow).
    R_prev : ndarray of shape (n,)
        Where :attr:`keeps_previous`: the scaled residuals on all training points one step
        before the end of the last :meth:`advance` of at least one step (what an
        :meth:`advance` one step shorter leaves in :attr:`R`, bitwise).
    counts : int64 ndarray of shape (5,)
        ``"mala"``: moves proposed and accepted since the last :meth:`reset_counts`, in the
        order of ``solvers._mala.COUNTS`` (Langevin moves, accepted ones, jumps, accepted
        jumps, accepted jumps that changed the particle's activation pattern, radial moves,
        accepted ones). Zero otherwise.
    f_sum : ndarray of shape (n,)
        ``"mala"``: the sum of the predictor after every pass since the last
        :meth:`reset_counts` (``f_sum / counts.sum() * N`` is its time average at pass
        resolution). Zero otherwise.

    Raises
    ------
    ValueError
        Inconsistent shapes, unknown activation or integrator, ``batch_size`` outside
        ``[0, n]`` (or not 0 with ``"mala"``), ``jumps`` outside ``[0, 1]``, or
        ``N (d+2) >= 2**32`` (beyond the noise counter), ``block`` outside ``[0, 1024]``,
        ``fine`` outside ``[0, 1]`` or above 0 with ``block >= 2``.
    """

    def __init__(self, X, y, n_particles, *, lam, eta, activation="relu", sharpness=10.0,
                 cap=3.0, batch_size=0, seed=0, integrator="em", jumps=None, radial=None,
                 block=0, fine=None, exchange=None):
        self.X = np.ascontiguousarray(X, dtype=np.float64)
        self.y = np.ascontiguousarray(y, dtype=np.float64)
        if self.X.ndim != 2 or self.y.shape != (self.X.shape[0],):
            raise ValueError(f"X must be (n, d) and y (n,), got {self.X.shape}, {self.y.shape}")
        n, d = self.X.shape
        N = int(n_particles)
        if N < 1 or N * (d + 2) >= MAX_DRAWS:
            raise ValueError(f"need 1 <= N and N (d+2) < 2**32, got N={N}, d={d}")
        if integrator == "mala" and 4 * N >= MAX_DRAWS:    # the radial move's draw positions
            raise ValueError(f"integrator 'mala' needs 4 N < 2**32, got N={N}")
        if activation not in ACT_CODES:
            raise ValueError(f"unknown activation {activation!r}; one of {', '.join(ACT_CODES)}")
        B = int(batch_size)
        if not 0 <= B <= n:
            raise ValueError(f"batch_size must be in [0, n={n}], got {B}")
        spec = integrator_named(integrator)
        if not spec.minibatch and B != 0:
            raise ValueError(f"integrator {integrator!r} samples the full-batch N-particle law; "
                             f"batch_size must be 0, got {B}")
        jumps = DEFAULT_JUMPS if jumps is None else float(jumps)
        if not 0.0 <= jumps <= 1.0:
            raise ValueError(f"jumps must be in [0, 1], got {jumps}")
        radial = DEFAULT_RADIAL if radial is None else float(radial)
        if not 0.0 <= radial <= 1.0:
            raise ValueError(f"radial must be in [0, 1], got {radial}")
        block = int(block)
        if not 0 <= block <= 1024:
            raise ValueError(f"block must be in [0, 1024], got {block}")
        fine = DEFAULT_FINE if fine is None else float(fine)
        if not 0.0 <= fine <= 1.0:
            raise ValueError(f"fine must be in [0, 1], got {fine}")
        if fine > 0.0 and block >= 2 and integrator == "mala":
            raise ValueError(f"the blocked pass (block={block}) has no fine steps: give fine=0 "
                             f"or block=0")
        exchange = DEFAULT_EXCHANGE if exchange is None else float(exchange)
        if not 0.0 <= exchange <= 1.0:
            raise ValueError(f"exchange must be in [0, 1], got {exchange}")
        if exchange > 0.0 and integrator == "mala":
            if block >= 2:
                raise ValueError(f"the blocked pass (block={block}) has no exchange move: give "
                                 f"exchange=0 or block=0")
            if activation != "relu":
                raise ValueError(f"the exchange move needs ReLU (a particle's output linear in "
                                 f"|theta|^2), not {activation!r}: give exchange=0")
        if not 0 <= int(seed) < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {seed}")
        self.n_particles, self.n, self.d = N, n, d
        self.lam, self.eta = float(lam), float(eta)
        self.activation, self.sharpness, self.cap = activation, float(sharpness), float(cap)
        self.kind = ACT_CODES[activation]
        self.params = _activations.activation_params(self.kind, sharpness, cap)
        self.batch_size = B
        self.seed = int(seed)
        self.integrator = integrator
        self.spec = spec
        self.jumps = jumps if integrator == "mala" else 0.0
        self.radial = radial if integrator == "mala" else 0.0
        self.fine = fine if integrator == "mala" else 0.0
        self.exchange = exchange if integrator == "mala" else 0.0
        # "mala": the blocked pass for block >= 2 (0 and 1: the sequential pass)
        self.block = block if integrator == "mala" and block >= 2 else 0
        # the blocked pass's moves and acceptances per particle when (4, N) (benchmarks)
        self.pcounts = np.zeros((4, 0), dtype=np.int64)
        self.dims = kernel_dims(d)   # selects a specialised kernel, or d at run time
        # "mala": a kernel compiled for ReLU alone, or the activation read at run time
        self.relu = (0,) if self.kind == _activations.ACT_RELU else ()
        self.T = np.empty((d + 2, N))
        self.partial = np.empty(((N + kernels.BLOCK - 1) // kernels.BLOCK, n))
        self.scratch = np.empty(kernels.scratch_shape(d, n))
        self.ibuf = np.empty((3, n), dtype=np.int64)
        self.fbuf = np.empty((2 * d + 2, n))
        self.f = np.empty(n)
        self.R = np.empty(n)
        self.R_prev = np.empty(n)
        self.sum_sq = 0.0
        self.counts = np.zeros(len(_mala.COUNTS), dtype=np.int64)
        self.f_sum = np.zeros(n)
        self.others: list[int] = []     # input dimensions to compile after a first compile
        if integrator == "mala":
            self.XT = np.ascontiguousarray(self.X.T)
            self.sub = np.empty(_mala.JUMP_SUBSET, dtype=np.int64)

    @property
    def keeps_previous(self) -> bool:
        """Whether :meth:`advance` records :attr:`R_prev` (full batch ``"em"`` and ``"lm"``):
        then one call gives the residuals of both parities at an observation."""
        return self.spec.parallel and self.batch_size == 0

    def reset_counts(self) -> None:
        """Zero :attr:`counts` and :attr:`f_sum`."""
        self.counts[:] = 0
        self.f_sum[:] = 0.0

    def advance(self, theta, tau, step0, nsteps, *, data_term=True) -> int:
        """Advance ``theta`` in place by ``nsteps`` steps, the first with global index ``step0``.

        Parameters
        ----------
        theta : ndarray of shape (N, d+2), float64, C-contiguous
            Particles, rows ``(a, w_1..w_d, b)``; updated in place.
        tau : float
            Temperature ``τ >= 0`` of these steps (noise amplitude ``sqrt(2 η τ)`` per step);
            ``τ > 0`` for ``"mala"`` unless ``nsteps = 0``.
        step0 : int
            Global index of the first step (keys the noise and the minibatches).
        nsteps : int
            Number of steps, ``>= 0``; with 0 only :attr:`f` and :attr:`R` are computed.
        data_term : bool
            False drops the data drift (the dynamics is then Ornstein–Uhlenbeck; for tests).

        Returns
        -------
        int
            0, or 1 when NaN/Inf appeared in the residuals or the particles, or the sum of
            their squares overflowed (``theta`` then holds the particles where the kernel
            stopped).
        """
        if theta.shape != (self.n_particles, self.d + 2) or theta.dtype != np.float64 \
                or not theta.flags.c_contiguous:
            raise ValueError(f"theta must be a C-contiguous float64 array of shape "
                             f"{(self.n_particles, self.d + 2)}")
        if step0 < 0 or nsteps < 0 or step0 + nsteps > _rng.MAX_STEP:
            raise ValueError(f"steps must lie in [0, 2**31), got {step0} + {nsteps}")
        kernels.to_columns(theta, self.T)
        if not self.spec.parallel:
            if nsteps > 0 and not float(tau) > 0.0:
                raise ValueError(f"integrator 'mala' needs tau > 0, got {tau}")
            if self.block:     # the blocked pass (solvers._mala_block)
                code = _mala_block.mala_block_steps(
                    self.T, self.X, self.y, self.XT, self.partial, self.scratch, self.sub,
                    self.f, self.R, self.counts, self.f_sum, self.lam, self.eta, float(tau),
                    self.seed, int(step0), int(nsteps), self.kind, self.params,
                    bool(data_term), self.jumps, self.radial, self.dims, self.relu,
                    self.block, _mala_block.lanes(self.block), self.pcounts)
            else:
                code = _mala.mala_steps(self.T, self.X, self.y, self.XT, self.partial,
                                        self.scratch, self.sub, self.f, self.R, self.counts,
                                        self.f_sum, self.lam, self.eta, float(tau), self.seed,
                                        int(step0), int(nsteps), self.kind, self.params,
                                        bool(data_term), self.jumps, self.radial, self.fine,
                                        self.dims, self.relu, self.exchange)
            self.sum_sq = kernels.to_rows(self.T, theta)
            return int(code) if code else (0 if math.isfinite(self.sum_sq) else 1)
        code = kernels.run_steps(self.T, self.X, self.y, self.batch_size, self.partial,
                                 self.scratch, self.ibuf, self.fbuf, self.f, self.R,
                                 self.R_prev, self.lam, self.eta, float(tau), self.seed,
                                 int(step0), int(nsteps), self.kind, self.params,
                                 bool(data_term), self.spec.noise, self.dims)
        self.sum_sq = kernels.to_rows(self.T, theta)
        return int(code) if code else (0 if math.isfinite(self.sum_sq) else 1)

    @property
    def kernel_name(self) -> str:
        """What :meth:`prepare` compiles, in words: the integrator's kernel, its activation
        and input dimension (for the line a run prints while it compiles)."""
        what = {"mala": "exact sampler's (\"mala\")", "em": "Euler-Maruyama",
                "lm": "Leimkuhler-Matthews"}.get(self.integrator, repr(self.integrator))
        act = "ReLU" if self.kind == _activations.ACT_RELU else self.activation
        if self.integrator != "mala":
            act = "every activation"
        dim = f"d = {self.d}" if self.dims else f"every d > {max(SPECIALISED_DIMS)}"
        return f"the {what} kernel for {act}, {dim}"

    def prepare(self, theta, step0=0, *, ahead=True) -> bool:
        """Compile the kernels of this stepper (or load them from numba's cache) by a zero-step
        :meth:`advance` on a copy of ``theta``; when that compiled them (a first run), note the
        same integrator's other input dimensions for :meth:`compile_others`, which the run
        calls when its stepping is done.

        Only this stepper's kernel variant (integrator, activation kind, input dimension) is
        compiled before the first step: measured on two idle cores, the exact sampler's
        kernel compiles in about 11 s, Euler-Maruyama's in about 45 s; all five input
        dimensions of Euler-Maruyama and the exact sampler together took 96 s before the
        first step when they were compiled up front.

        Parameters
        ----------
        theta : ndarray of shape (N, d+2)
            Particles (not changed).
        step0 : int
            Global step index, as for :meth:`advance`.
        ahead : bool
            False: compile this stepper's kernels only.

        Returns
        -------
        bool
            True when this call compiled.
        """
        before = _compiles()
        self.advance(np.array(theta, dtype=np.float64, order="C"), 0.0, int(step0), 0)
        if _compiles() == before:
            return False
        if ahead:
            kinds = kernel_variants()
            mine = self.d if self.d in SPECIALISED_DIMS else kinds[-1]
            self.others = [d for d in kinds if d != mine]
        return True

    def compile_others(self):
        """Start the background compile (:func:`compile_in_background`) of the input
        dimensions that :meth:`prepare` noted after a first compile, once; nothing otherwise.

        A run calls this when its stepping is done, not before: beside a run of two chains on
        two cores, even at ``nice 19``, the compile slowed the stepping by a third (46 s
        against 34 s for the default run, measured), since the chains meet at every
        observation and leave a core idle for it while they wait.

        Returns
        -------
        subprocess.Popen or None
            As :func:`compile_in_background`.
        """
        others, self.others = self.others, []
        if not others:
            return None
        return compile_in_background(others, integrator=self.integrator, relu=bool(self.relu))

    def noise(self, step):
        """The noise ``ξ`` of shape (N, d+2) that step ``step`` adds (before the factor
        ``sqrt(2ητ)``)."""
        out = np.empty((self.n_particles, self.d + 2))
        _rng.gaussian_block(self.seed, int(step), self.n_particles, self.d + 2, out)
        return out

    def batch(self, step):
        """Indices (B,) of the minibatch of step ``step`` (``arange(n)`` for full batch)."""
        if self.batch_size == 0:
            return np.arange(self.n)
        perm = np.empty(self.n, dtype=np.int64)
        out = np.empty(self.n, dtype=np.int64)
        _rng.batch_indices(self.seed, int(step), self.n, self.batch_size, perm, out)
        return out[:self.batch_size].copy()
