"""Op samples: elementwise math (composites and library calls); summaries, scans and sorts.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch

from samples_common import FLOATS_OR_SKIP, ONLY_F32, T, bools, each, ints, pos, sample, t


# elementwise math: composites, then library calls (with each alias)
sample("torch.frac", "frac", lambda a: torch.frac(a * 3) + a.frac(), t(3, 4))
sample("torch.deg2rad", "deg2rad", lambda a: torch.deg2rad(a) + a.deg2rad(), t(3, 4))
sample("torch.rad2deg", "rad2deg", lambda a: torch.rad2deg(a) + a.rad2deg(), t(3, 4))
sample("torch.positive", "positive", lambda a: torch.positive(a) + a.positive(), t(3, 4))
sample("torch.sgn", "sgn", lambda a: torch.sgn(a) + a.sgn(), t(3, 4))
sample("torch.log10", "log10", lambda a: torch.log10(a) + a.log10(), pos(3, 4))
sample("torch.erfc", "erfc", lambda a: torch.erfc(a) + a.erfc() + torch.special.erfc(a), t(3, 4))
sample("torch.special.ndtr", "ndtr", lambda a: torch.special.ndtr(a), t(3, 4))
sample("torch.logical_xor", "logical_xor", lambda a, b: torch.logical_xor(a, b) | a.logical_xor(b > 0), bools(3, 4),
       t(3, 4))
each("inf", {n: (lambda a, _n=n.split(".")[-1]: (getattr(torch, _n)(a), getattr(a, _n)()))
           for n in ("torch.isinf", "torch.isposinf", "torch.isneginf", "torch.isfinite", "torch.isreal")},
     t(3, 4, low=-1e38, high=1e38))
for _op in ("isinf", "isposinf", "isneginf", "isfinite"):
    sample(f"torch.{_op}", f"{_op}_nan_inf", lambda a, _n=_op: getattr(torch, _n)(a.log() * a.exp()), t(3, 4))
sample("torch.nan_to_num", "nan_to_num", lambda a: torch.nan_to_num(a.log()) + a.log().nan_to_num(1.0, 2.0, -2.0),
       t(3, 4))
sample("torch.fmax", "fmax", lambda a, b: (torch.fmax(a.log(), b), a.fmax(b)), t(3, 4), t(4))
sample("torch.fmin", "fmin", lambda a, b: (torch.fmin(a, b.log()), a.fmin(b)), t(3, 4), t(3, 4))
sample("torch.xlogy", "xlogy", lambda a, b: torch.xlogy(a, b) + a.xlogy(2.0) + torch.special.xlogy(a * 0, b),
       t(3, 4), pos(3, 4))
sample("torch.special.xlog1py", "xlog1py", lambda a, b: torch.special.xlog1py(a, b), t(3, 4), pos(3, 4))
sample("torch.logaddexp", "logaddexp", lambda a, b: torch.logaddexp(a, b) + a.logaddexp(b * 10), t(3, 4), t(4))
sample("torch.logaddexp2", "logaddexp2", lambda a, b: torch.logaddexp2(a, b) + a.logaddexp2(b), t(3, 4), t(3, 4))
sample("torch.logit", "logit", lambda a: torch.logit(a) + a.logit(0.1) + torch.special.logit(a, 1e-3), t(3, 4, low=0.05,
       high=0.95))
sample("torch.sinc", "sinc", lambda a: torch.sinc(a) + a.sinc() + torch.special.sinc(a * 0), t(3, 4))
sample("torch.special.entr", "entr", lambda a: torch.special.entr(a), t(3, 4, low=-0.5, high=2))
sample("torch.float_power", "float_power", lambda a, b: torch.float_power(a, b) + a.float_power(2), pos(3, 4), t(4))
sample("torch.floor_divide", "floor_divide", lambda a, b: torch.floor_divide(a, b) + a.floor_divide(0.7) + a // b,
       t(3, 4), pos(3, 4), dtypes=ONLY_F32)
sample("torch.Tensor.__rmod__", "rmod", lambda a: 2.5 % a, pos(3, 4), dtypes=FLOATS_OR_SKIP)
sample("torch.addcdiv", "addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=0.5) + a.addcdiv(b, c), t(3, 4), t(4),
       pos(3, 1))
sample("torch.isclose", "isclose", lambda a, b: (torch.isclose(a, b, atol=0.5), a.isclose(a.log(), equal_nan=True)),
       t(3, 4), t(3, 4))
_DOMAINS = {"acosh": (1.0, 3.0), "atanh": (-0.9, 0.9), "acos": (-0.9, 0.9), "asin": (-0.9, 0.9), "erfinv": (-0.9, 0.9),
            "lgamma": (0.1, 3.0), "digamma": (0.1, 3.0)}
_SPECIAL_ALIASES = ("erfinv", "digamma", "i0")
for _name in ("acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "erfinv", "lgamma", "digamma", "i0",
              "signbit", "angle"):
    _lo, _hi = _DOMAINS.get(_name, (-2.0, 2.0))
    sample(f"torch.{_name}", f"{_name}_library", lambda a, _n=_name: (getattr(torch, _n)(a), getattr(a, _n)())
           + ((getattr(torch.special, _n)(a),) if _n in _SPECIAL_ALIASES else ()), T((3, 4), low=_lo, high=_hi))
for _name in ("atan2", "hypot", "copysign", "nextafter", "heaviside", "igamma", "igammac"):
    sample(f"torch.{_name}", f"{_name}_library", lambda a, b, _n=_name: (getattr(torch, _n)(a, b), getattr(a, _n)(b)),
           pos(3, 4), t(3, 4) if _name not in ("igamma", "igammac") else pos(3, 4))
sample("torch.ldexp", "ldexp", lambda a, e: torch.ldexp(a, e) + a.ldexp(e), t(3, 4), ints(3, 4, low=-3, high=3))
sample("torch.mvlgamma", "mvlgamma", lambda a: torch.mvlgamma(a, 2) + a.mvlgamma(1), t(3, 4, low=1.0, high=3.0))
sample("torch.frexp", "frexp", lambda a: (torch.frexp(a), a.frexp()), t(3, 4), dtypes=FLOATS_OR_SKIP)
sample("torch.polygamma", "polygamma", lambda a: torch.polygamma(1, a) + a.polygamma(2), pos(3, 4))
_SPECIAL_ARGS = {"polygamma": (1,), "multigammaln": (2,)}
for _name in ("airy_ai", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "erfcx", "i0e", "i1", "i1e", "log_ndtr",
              "ndtri", "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0", "modified_bessel_k1",
              "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "gammaln", "psi"):
    sample(f"torch.special.{_name}", f"special_{_name}", lambda a, _n=_name: getattr(torch.special, _n)(a),
           t(3, 4, low=0.05, high=0.95), dtypes=FLOATS_OR_SKIP)
sample("torch.special.polygamma", "special_polygamma", lambda a: torch.special.polygamma(1, a), pos(3, 4),
       dtypes=FLOATS_OR_SKIP)
sample("torch.special.multigammaln", "special_multigammaln", lambda a: torch.special.multigammaln(a, 2),
       t(3, 4, low=1.0, high=3.0), dtypes=FLOATS_OR_SKIP)
sample("torch.special.zeta", "special_zeta", lambda a, b: torch.special.zeta(a, b), t(3, 4, low=1.5, high=3), pos(3, 4),
       dtypes=FLOATS_OR_SKIP)
for _name in ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
              "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
              "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
              "shifted_chebyshev_polynomial_w"):
    sample(f"torch.special.{_name}", f"special_{_name}", lambda a, _n=_name: getattr(torch.special, _n)(a, 3),
           t(3, 4, low=-1, high=1), dtypes=FLOATS_OR_SKIP)

# summaries, scans and sorts
sample("torch.all", "all", lambda a, m: (torch.all(m), m.all(1), a.all(), torch.all(a > 1, 0, keepdim=True)),
       t(3, 4), bools(3, 4))
sample("torch.any", "any_bool", lambda a, m: (torch.any(m), m.any(1), a.any(), torch.any(a > 1, 0, keepdim=True)),
       t(3, 4), bools(3, 4))
sample("torch.any", "any", lambda a: torch.any(a, (0, 1)), ints(3, 4, high=2, dtype=None))
sample("torch.count_nonzero", "count_nonzero", lambda a: (torch.count_nonzero(a), a.count_nonzero((0, 1)),
       a.count_nonzero(1)), ints(3, 4, high=3, dtype=None))
sample("torch.nansum", "nansum", lambda a: (torch.nansum(a.log()), a.log().nansum(1)), t(3, 4))
sample("torch.nanmean", "nanmean", lambda a: (torch.nanmean(a.log(), 0), a.log().nanmean(-1, keepdim=True)), t(3, 4))
sample("torch.aminmax", "aminmax", lambda a: (torch.aminmax(a), a.aminmax(dim=1), a.aminmax(dim=0, keepdim=True)),
       t(3, 4))
sample("torch.std_mean", "std_mean", lambda a: torch.std_mean(a, 1) + torch.std_mean(a, correction=0), t(3, 8))
sample("torch.cov", "cov", lambda a: (torch.cov(a), a.cov(correction=0)), t(3, 6))
sample("torch.corrcoef", "corrcoef", lambda a: (torch.corrcoef(a), a.corrcoef()), t(2, 5))
for _name, _extra in (("cumsum", (1,)), ("cumprod", (1,)), ("cummax", (0,)), ("cummin", (1,)), ("logcumsumexp", (1,)),
                      ("sort", ()), ("argsort", (0,)), ("msort", ()), ("topk", (2,)), ("kthvalue", (2,)),
                      ("median", ()), ("nanmedian", (1,)), ("mode", (1,)), ("histc", (4,))):
    sample(f"torch.{_name}", f"{_name}_library", lambda a, _n=_name, _x=_extra: (getattr(torch, _n)(a, *_x),
           getattr(a, _n)(*_x)), t(3, 5))
sample("torch.quantile", "quantile", lambda a, q: (torch.quantile(a, 0.3), a.quantile(q, 1)), t(3, 5), T((2,), low=0,
       high=1), dtypes=ONLY_F32)
sample("torch.nanquantile", "nanquantile", lambda a: (torch.nanquantile(a.log(), 0.5), a.nanquantile(0.5, 0, keepdim=True)),
       t(3, 5), dtypes=ONLY_F32)
sample("torch.unique", "unique", lambda a: (torch.unique(a), a.unique(return_counts=True)), ints(3, 5, high=3, dtype=None))
sample("torch.unique_consecutive", "unique_consecutive", lambda a: (torch.unique_consecutive(a, dim=0),
       a.unique_consecutive(return_inverse=True)), ints(4, 2, high=2))
sample("torch.searchsorted", "searchsorted", lambda v: torch.searchsorted(torch.tensor([-1.0, 0.0, 1.0]), v), t(3, 4))
sample("torch.bucketize", "bucketize", lambda v: torch.bucketize(v, torch.tensor([-1.0, 0.0, 1.0])), t(3, 4))
sample("torch.isin", "isin", lambda a, b: torch.isin(a, b), ints(3, 4, high=6), ints(3, high=6), dtypes=FLOATS_OR_SKIP)
sample("torch.histogram", "histogram", lambda a: (torch.histogram(a, 4), a.histogram(3)), t(3, 5), dtypes=FLOATS_OR_SKIP)
sample("torch.bincount", "bincount", lambda a: (torch.bincount(a), a.bincount(minlength=6)), ints(8, high=5),
       dtypes=FLOATS_OR_SKIP)
each("integral", {"torch.cumulative_trapezoid": lambda a: torch.cumulative_trapezoid(a),
                  "torch.trapezoid": lambda a: torch.trapezoid(a, dx=0.5), "torch.trapz": lambda a: torch.trapz(a)}, t(3, 5))
