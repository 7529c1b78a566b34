"""Linear algebra beyond library_calls.py's matmuls: dot products decomposed into a
multiply and a sum (dot, vdot, vecdot) or a scaled outer product (addr); the matrix-vector
and batched products (mv, addmv, addbmm, tensordot, kron, ...), the factorisations,
solvers, inverses, determinants and norms of torch and torch.linalg run whole, and so does
nn.MultiheadAttention's multi_head_attention_forward (its projections and attention)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fusionlens.ops.torch_ops.common import _is_float, cast
from fusionlens.ops.torch_ops.pointwise import add, mul, outer
from fusionlens.ops.torch_ops.reductions import sum
from fusionlens.ops.torch_ops.registry import NoDecomposition, library, register


def _real(*xs):
    if any(x.dtype.is_complex or not _is_float(x.dtype) for x in xs):
        raise NoDecomposition("complex or integer tensors")


@register(torch.dot, torch.Tensor.dot, torch.vdot, torch.Tensor.vdot)
def dot(input, tensor):
    _real(input, tensor)
    return _products_summed(input, tensor, None)


@register(torch.linalg.vecdot)
def vecdot(x, y, *, dim=-1):
    _real(x, y)
    return _products_summed(x, y, dim)


def _products_summed(x, y, dim):
    """sum(x * y) with the products kept in float32 for half types, as eager's kernels do (a
    product rounded to bf16 before the sum would add an error growing with the length)."""
    dtype = torch.promote_types(x.dtype, y.dtype)
    if dtype not in (torch.float16, torch.bfloat16):
        return sum(mul(x, y), dim) if dim is not None else sum(mul(x, y))
    products = mul(cast(x, torch.float32), cast(y, torch.float32))
    return cast(sum(products, dim) if dim is not None else sum(products), dtype)


@register(torch.addr, torch.Tensor.addr)
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    _real(input, vec1, vec2)
    o = outer(vec1, vec2)
    o = mul(o, alpha) if alpha != 1 else o
    if beta == 0:  # torch ignores the input then (its NaNs too)
        return o
    return add(mul(input, beta) if beta != 1 else input, o)


def _libraries(namespace, names, methods=True):
    out = {}
    for n in names:
        fns = [getattr(namespace, n)]
        if methods and namespace is torch and hasattr(torch.Tensor, n):
            fns.append(getattr(torch.Tensor, n))
        out[n] = library(*fns)
    return out


TORCH = _libraries(torch, (
    "mv", "addmv", "addbmm", "inner", "kron", "trace", "cross", "dist", "cholesky", "cholesky_inverse",
    "cholesky_solve", "lu_solve", "qr", "svd", "pinverse", "matrix_exp", "logdet", "det", "slogdet",
    "triangular_solve", "geqrf", "ormqr", "norm", "matrix_power", "inverse", "renorm"))
FUNCTIONS = _libraries(torch, ("tensordot", "cdist", "chain_matmul", "lu", "lu_unpack"), methods=False)
LINALG = _libraries(torch.linalg, (
    "cholesky", "cholesky_ex", "cond", "cross", "det", "eig", "eigh", "eigvals", "eigvalsh", "householder_product",
    "inv", "inv_ex", "ldl_factor", "ldl_factor_ex", "ldl_solve", "lstsq", "lu", "lu_factor", "lu_factor_ex",
    "lu_solve", "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve",
    "solve_ex", "solve_triangular", "svd", "svdvals", "tensorinv", "tensorsolve", "vander", "matrix_exp"))

multi_head_attention_forward = library(F.multi_head_attention_forward)
