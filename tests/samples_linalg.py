"""Op samples: linear algebra, attention, complex numbers and Fourier transforms, creation from arguments.

Imported by tests/op_samples.py, in a fixed order: the order of SAMPLES (test ids, docs/ops.md).
"""

import torch

from samples_common import FLOATS_OR_SKIP, ONLY_F32, each, pos, sample, t


# linear algebra
sample("torch.dot", "dot", lambda a, b: torch.dot(a, b) + a.dot(b) + torch.vdot(a, b) + a.vdot(b), t(5), t(5))
sample("torch.linalg.vecdot", "vecdot", lambda a, b: torch.linalg.vecdot(a, b) + torch.linalg.vecdot(a, b, dim=0).sum(),
       t(3, 4), t(3, 4))
sample("torch.addr", "addr", lambda m, a, b: torch.addr(m, a, b) + m.addr(a, b, beta=0.5, alpha=2)
       + torch.addr(m, a, b, beta=0), t(3, 4), t(3), t(4))
_SPD = lambda a: a @ a.mT + torch.eye(a.shape[-1])  # noqa: E731  (symmetric positive definite)
each("mv", {
    "torch.mv": lambda m, v, c, b1, b2: (torch.mv(m, v), m.mv(v)),
    "torch.addmv": lambda m, v, c, b1, b2: (torch.addmv(c, m, v), c.addmv(m, v, beta=0.5)),
    "torch.addbmm": lambda m, v, c, b1, b2: (torch.addbmm(m[:, :3], b1, b2), m[:, :3].addbmm(b1, b2)),
    "torch.inner": lambda m, v, c, b1, b2: (torch.inner(v, v), m.inner(v)),
    "torch.kron": lambda m, v, c, b1, b2: (torch.kron(m, c[:2]), m.kron(v)),
    "torch.trace": lambda m, v, c, b1, b2: (torch.trace(m), m.trace()),
    "torch.tensordot": lambda m, v, c, b1, b2: torch.tensordot(b1, b2, 1),
    "torch.chain_matmul": lambda m, v, c, b1, b2: torch.chain_matmul(m[:, :3], m[:, :3])},
     t(3, 4), t(4), t(3), t(2, 3, 2), t(2, 2, 3), dtypes=FLOATS_OR_SKIP)
_UPPER = lambda a: a.triu() + 3 * torch.eye(3)  # noqa: E731  (well conditioned, upper triangular)
each("matrix", {
    "torch.cholesky": lambda a: (torch.cholesky(_SPD(a)), _SPD(a).cholesky()),
    "torch.cholesky_inverse": lambda a: (torch.cholesky_inverse(_UPPER(a).mT), _UPPER(a).mT.cholesky_inverse()),
    "torch.cholesky_solve": lambda a: (torch.cholesky_solve(a, _UPPER(a).mT), a.cholesky_solve(_UPPER(a).mT)),
    "torch.qr": lambda a: (torch.qr(a), a.qr()), "torch.svd": lambda a: (torch.svd(a)[1], a.svd()[1]),
    "torch.pinverse": lambda a: (torch.pinverse(a), a.pinverse()),
    "torch.matrix_exp": lambda a: (torch.matrix_exp(a), a.matrix_exp()),
    "torch.logdet": lambda a: (torch.logdet(_SPD(a)), _SPD(a).logdet()), "torch.det": lambda a: (torch.det(a), a.det()),
    "torch.slogdet": lambda a: (torch.slogdet(a), a.slogdet()),
    "torch.triangular_solve": lambda a: (torch.triangular_solve(a, _UPPER(a)), a.triangular_solve(_UPPER(a))),
    "torch.geqrf": lambda a: (torch.geqrf(a), a.geqrf()), "torch.norm": lambda a: (torch.norm(a), a.norm(p=1)),
    "torch.matrix_power": lambda a: (torch.matrix_power(a, 2), a.matrix_power(3)),
    "torch.inverse": lambda a: (torch.inverse(_SPD(a)), _SPD(a).inverse()),
    "torch.renorm": lambda a: (torch.renorm(a, 2, 0, 1.0), a.renorm(1, 1, 0.5)),
    "torch.cross": lambda a: (torch.cross(a, a.flip(0), 0), a.cross(a.flip(0), 1)),
    "torch.dist": lambda a: (torch.dist(a, a.t()), a.dist(a, 1)), "torch.cdist": lambda a: torch.cdist(a, a),
    "torch.lu": lambda a: torch.lu(a)}, t(3, 3), dtypes=FLOATS_OR_SKIP)
_LU = lambda a: torch.linalg.lu_factor(_SPD(a))  # noqa: E731
each("lu", {"torch.lu_solve": lambda a, b: (torch.lu_solve(b, *_LU(a)), b.lu_solve(*_LU(a))),
            "torch.lu_unpack": lambda a, b: torch.lu_unpack(*_LU(a)),
            "torch.linalg.lu_solve": lambda a, b: torch.linalg.lu_solve(*_LU(a), b),
            "torch.ormqr": lambda a, b: (torch.ormqr(*torch.geqrf(a), b), torch.geqrf(a)[0].ormqr(torch.geqrf(a)[1], b))},
     t(3, 3), t(3, 2), dtypes=FLOATS_OR_SKIP)
each("linalg", {f"torch.linalg.{name}": fn for name, fn in {
    "cholesky": lambda a, b: torch.linalg.cholesky(_SPD(a)), "cholesky_ex": lambda a, b: torch.linalg.cholesky_ex(_SPD(a)),
    "cond": lambda a, b: torch.linalg.cond(_SPD(a)), "cross": lambda a, b: torch.linalg.cross(a, a.flip(0)),
    "det": lambda a, b: torch.linalg.det(a), "eig": lambda a, b: torch.linalg.eig(_SPD(a)),
    "eigh": lambda a, b: torch.linalg.eigh(_SPD(a)), "eigvals": lambda a, b: torch.linalg.eigvals(_SPD(a)),
    "eigvalsh": lambda a, b: torch.linalg.eigvalsh(_SPD(a)), "inv": lambda a, b: torch.linalg.inv(_SPD(a)),
    "inv_ex": lambda a, b: torch.linalg.inv_ex(_SPD(a)), "ldl_factor": lambda a, b: torch.linalg.ldl_factor(_SPD(a)),
    "ldl_factor_ex": lambda a, b: torch.linalg.ldl_factor_ex(_SPD(a)),
    "ldl_solve": lambda a, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(_SPD(a)), b),
    "lstsq": lambda a, b: torch.linalg.lstsq(_SPD(a), b).solution, "lu": lambda a, b: torch.linalg.lu(a),
    "lu_factor": lambda a, b: torch.linalg.lu_factor(a), "lu_factor_ex": lambda a, b: torch.linalg.lu_factor_ex(a),
    "matrix_norm": lambda a, b: torch.linalg.matrix_norm(a), "matrix_power": lambda a, b: torch.linalg.matrix_power(a, 2),
    "matrix_rank": lambda a, b: torch.linalg.matrix_rank(_SPD(a)), "multi_dot": lambda a, b: torch.linalg.multi_dot(
        [a, a, b]), "norm": lambda a, b: torch.linalg.norm(a), "pinv": lambda a, b: torch.linalg.pinv(_SPD(a)),
    "qr": lambda a, b: torch.linalg.qr(a), "slogdet": lambda a, b: torch.linalg.slogdet(a),
    "solve": lambda a, b: torch.linalg.solve(_SPD(a), b), "solve_ex": lambda a, b: torch.linalg.solve_ex(_SPD(a), b),
    "solve_triangular": lambda a, b: torch.linalg.solve_triangular(_UPPER(a), b, upper=True),
    "svd": lambda a, b: torch.linalg.svd(a)[1], "svdvals": lambda a, b: torch.linalg.svdvals(a),
    "tensorinv": lambda a, b: torch.linalg.tensorinv(_SPD(a), 1),
    "tensorsolve": lambda a, b: torch.linalg.tensorsolve(_SPD(a), b[:, 0]),
    "vander": lambda a, b: torch.linalg.vander(b[:, 0]), "matrix_exp": lambda a, b: torch.linalg.matrix_exp(a),
    "householder_product": lambda a, b: torch.linalg.householder_product(*torch.geqrf(a))}.items()},
     t(3, 3), t(3, 2), dtypes=FLOATS_OR_SKIP)

_MHA = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
sample("torch.nn.functional.multi_head_attention_forward", "multihead_attention", lambda q, k: (_MHA(q, q, q),
       _MHA(q, k, k, average_attn_weights=False)[1]), t(2, 3, 8), t(2, 5, 8), dtypes=ONLY_F32)

# complex numbers, Fourier transforms, small integer casts
for _op in ("byte", "char", "short"):
    sample(f"torch.Tensor.{_op}", f"{_op}_cast", lambda a, _n=_op: getattr(a * 4, _n)() + 1, pos(3, 4))
each("complex", {
    "torch.view_as_complex": lambda a, b: torch.view_as_complex(a),
    "torch.view_as_real": lambda a, b: torch.view_as_real(torch.view_as_complex(a)),
    "torch.complex": lambda a, b: torch.complex(b, b), "torch.polar": lambda a, b: torch.polar(b.abs(), b),
    "torch.Tensor.cfloat": lambda a, b: b.cfloat(), "torch.Tensor.cdouble": lambda a, b: b.cdouble(),
    "torch.Tensor.chalf": lambda a, b: b.chalf().cfloat(),
    "torch.real": lambda a, b: torch.real(b.cfloat()), "torch.imag": lambda a, b: torch.imag(b.cfloat()),
    "torch.conj": lambda a, b: (torch.conj(b.cfloat()), b.cfloat().conj()),
    "torch.conj_physical": lambda a, b: (torch.conj_physical(b.cfloat()), b.cfloat().conj_physical()),
    "torch.resolve_conj": lambda a, b: (torch.resolve_conj(b.cfloat()), b.cfloat().resolve_conj()),
    "torch.resolve_neg": lambda a, b: (torch.resolve_neg(b), b.resolve_neg())}, t(3, 2), t(4), dtypes=FLOATS_OR_SKIP)
_FFT = ("fft", "fft2", "fftn", "ifft", "ifft2", "ifftn", "rfft", "rfft2", "rfftn", "irfft", "irfft2", "irfftn", "hfft",
        "hfft2", "hfftn", "ihfft", "ihfft2", "ihfftn", "fftshift", "ifftshift")
for _name in _FFT:
    sample(f"torch.fft.{_name}", f"fft_{_name}", lambda a, _n=_name: getattr(torch.fft, _n)(a), t(4, 6), dtypes=FLOATS_OR_SKIP)
_STFT = lambda a: torch.stft(a, 8, return_complex=True, window=torch.ones(8))  # noqa: E731
each("spectrogram", {"torch.stft": lambda a: (_STFT(a), a.stft(8, return_complex=True, window=torch.ones(8))),
                     "torch.istft": lambda a: (torch.istft(_STFT(a), 8, window=torch.ones(8)),
                                               _STFT(a).istft(8, window=torch.ones(8)))}, t(32), dtypes=FLOATS_OR_SKIP)

# made from arguments
each("new", {"torch.Tensor.new_zeros": lambda a: (a.new_zeros(2, 3), a.new_zeros(2, dtype=torch.int64)),
             "torch.Tensor.new_ones": lambda a: (a.new_ones((3,)), a.new_ones(1, 4) + a),
             "torch.Tensor.new_full": lambda a: a.new_full((2,), 3.5)}, t(3, 4))
sample("torch.scalar_tensor", "scalar_tensor", lambda a: a + torch.scalar_tensor(2.5) + torch.scalar_tensor(
       3, dtype=torch.int64), t(3, 4))
sample("torch.fill", "fill", lambda a, v: (torch.fill(a, 1.5), torch.fill(a, v)), t(3, 4), t())
sample("torch.eye", "eye", lambda a: a + torch.eye(3, 4) + torch.eye(4, dtype=torch.bool)[:3], t(3, 4))
each("data", {"torch.tensor": lambda a: a + torch.tensor([1.0, 2.0, 3.0, 4.0]),
              "torch.as_tensor": lambda a: a + torch.as_tensor([1, 2, 3, 4]),
              "torch.Tensor.new_tensor": lambda a: a + a.new_tensor([0.5, 0.5, 0.5, 0.5])}, t(3, 4))
each("uninitialised", {"torch.empty": lambda a: torch.empty(2, 3), "torch.empty_like": lambda a: torch.empty_like(a),
                       "torch.empty_strided": lambda a: torch.empty_strided((2, 2), (1, 2)),
                       "torch.empty_permuted": lambda a: torch.empty_permuted((2, 3), (1, 0)),
                       "torch.Tensor.new_empty": lambda a: a.new_empty((2,)),
                       "torch.Tensor.new_empty_strided": lambda a: a.new_empty_strided((2,), (1,))}, t(3, 4), random=True)
sample("torch.linspace", "linspace", lambda a: a + torch.linspace(0, 1, 4), t(3, 4))
sample("torch.logspace", "logspace", lambda a: a * torch.logspace(-1, 1, 4, base=2.0), t(3, 4))
each("random", {
    "torch.rand": lambda a, p: torch.rand(3), "torch.randn": lambda a, p: torch.randn(2, 2),
    "torch.randint": lambda a, p: torch.randint(5, (3,)), "torch.randperm": lambda a, p: torch.randperm(4),
    "torch.rand_like": lambda a, p: torch.rand_like(a), "torch.randn_like": lambda a, p: torch.randn_like(a),
    "torch.randint_like": lambda a, p: torch.randint_like(a, 3), "torch.normal": lambda a, p: torch.normal(a, 1.0),
    "torch.poisson": lambda a, p: torch.poisson(p), "torch.bernoulli": lambda a, p: (torch.bernoulli(p / 3),
                                                                                    (p / 3).bernoulli()),
    "torch.multinomial": lambda a, p: (torch.multinomial(p, 2), p.multinomial(1))},
     t(3, 4), pos(3, 4), random=True, dtypes=FLOATS_OR_SKIP)
each("draw", {"torch.ops.aten.cauchy.default": lambda a: torch.ops.aten.cauchy.default(a, 0.0, 2.0),
              "torch.ops.aten.exponential.default": lambda a: torch.ops.aten.exponential.default(a, 3.0),
              "torch.ops.aten.geometric.default": lambda a: torch.ops.aten.geometric.default(a, 0.3),
              "torch.ops.aten.log_normal.default": lambda a: torch.ops.aten.log_normal.default(a),
              "torch.ops.aten.uniform.default": lambda a: torch.ops.aten.uniform.default(a, -1.0, 1.0),
              "torch.ops.aten.normal_functional.default": lambda a: torch.ops.aten.normal_functional.default(a, 1.0),
              "torch.ops.aten.random": lambda a: (torch.ops.aten.random(a), torch.ops.aten.random(a, 5),
                                                  torch.ops.aten.random(a, -3, 3))},
     t(3, 4), dtypes=ONLY_F32, random=True)  # the functional forms of x.cauchy_(), x.uniform_(a, b), ...
