"""Analysis of runs and studies ([LJM26], [SKM22], [LWTM26]; THEORY §4, §6–§8, §10).

- :func:`analyze`: everything ``meanfield analyze`` computes for a run (rays, kinks, ``P``,
  Theorem 6, ``W2``, the references), as a :class:`RunAnalysis`;
- :func:`find_rays`, :func:`data_kinks`: rays of a particle snapshot and their kink
  hyperplanes decided against the data (:func:`kink_hyperplanes`: without the data);
  :func:`analyze_stage`: the rays of a stage's stationary measure, its frames pooled;
- :func:`gibbs_rays`: the rays of the exact Gibbs measure at a temperature;
- :func:`convex_counts`, :func:`ray_sensitivity`: the convex reference's ray and kink counts
  above a weight floor, and ``J``, ``K`` over a range of each threshold;
- :func:`count_dichotomies`, :func:`cover`: ``P``, the number of affine dichotomies;
- :func:`theorem6`: the [LJM26] Theorem 6 checks on ternary patterns;
- :func:`certificate`: ``G`` of the zero-temperature problem (THEORY §4);
- :func:`w2_exact`, :func:`w2_sliced`, :func:`w2_snapshots`: Wasserstein-2 distances;
- :func:`two_point_predict`: [LJM26] Proposition 7 closed forms (THEORY §8);
- :func:`minnorm`, :func:`closed_form_limit`: the minimum-norm interpolant and GD's limit in
  the high-dimensional study (THEORY §10).

Pure functions of arrays and of run objects (:class:`RunLike`, the declared protocol of what
the analysis reads from a run; a :class:`meanfield.store.Run` is one); it imports :mod:`solvers` and never :mod:`meanfield`. Imports are lazy: numba
and POT load on first use.
"""

from solvers.lazy import exports

_EXPORTS = {
    "analyze": "analysis.run_analysis:analyze",
    "RunAnalysis": "analysis.run_analysis:RunAnalysis",
    "RunLike": "analysis.protocols:RunLike",
    "find_rays": "analysis.rays:find_rays",
    "analyze_stage": "analysis.run_analysis:analyze_stage",
    "gibbs_rays": "analysis.gibbs_rays:gibbs_rays",
    "kink_hyperplanes": "solvers.geometry:kink_hyperplanes",
    "data_kinks": "analysis.kinks:data_kinks",
    "convex_counts": "analysis.ray_checks:convex_counts",
    "ray_sensitivity": "analysis.ray_checks:sensitivity",
    "count_dichotomies": "analysis.dichotomies:count_dichotomies",
    "cover": "analysis.dichotomies:cover",
    "theorem6": "analysis.ternary:theorem6",
    "certificate": "analysis.certificate:certificate",
    "w2_exact": "analysis.transport:w2_exact",
    "w2_sliced": "analysis.transport:w2_sliced",
    "w2_snapshots": "analysis.transport:w2_snapshots",
    "two_point_predict": "analysis.two_point:predict",
    "compare_run": "analysis.references:compare_run",
    "minnorm": "analysis.minnorm:minnorm",
    "closed_form_limit": "analysis.minnorm:closed_form_limit",
}

__all__ = list(_EXPORTS)
__getattr__, __dir__ = exports(__name__, _EXPORTS)
