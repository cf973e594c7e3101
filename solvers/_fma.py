"""The explicit fused multiply-add of the kernels (``solvers._kernels``, ``solvers._mala``).

Every multiply-add of the kernels is this :func:`_fma`, rounded once (``llvm.fma``) where the
target has FMA, so that it rounds the same way in every compiled context and the results are
bitwise reproducible (the kernels never let the compiler contract or reassociate on its own).
"""

from __future__ import annotations

import llvmlite.binding as _llvm
import numba as nb
from llvmlite import ir as _ir
from numba.core import cgutils as _cgutils
from numba.core import types as _types
from numba.extending import intrinsic as _intrinsic


def _target_has_fma() -> bool:
    if nb.config.CPU_FEATURES:
        return "+fma" in nb.config.CPU_FEATURES.split(",")
    if nb.config.CPU_NAME:     # an explicit (e.g. generic) target without a feature list
        return False
    return "+fma" in _llvm.get_host_cpu_features().flatten().split(",")


_HAS_FMA = _target_has_fma()


@_intrinsic
def _fma(typingctx, a, b, c):
    """``a*b + c`` rounded once (``llvm.fma``), or the plain ``a*b + c`` on targets without FMA.

    Explicit, so every use rounds the same way in every compiled context (the kernels never
    let the compiler contract or reassociate on its own).
    """
    sig = _types.float64(_types.float64, _types.float64, _types.float64)

    def codegen(context, builder, signature, args):
        x, y, z = args
        if _HAS_FMA:
            dt = _ir.DoubleType()
            fn = _cgutils.get_or_insert_function(builder.module,
                                                 _ir.FunctionType(dt, [dt, dt, dt]),
                                                 "llvm.fma.f64")
            return builder.call(fn, [x, y, z])
        return builder.fadd(builder.fmul(x, y), z)

    return sig, codegen

