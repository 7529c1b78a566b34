"""The backward of batch_norm in training mode.

Training-mode batch_norm runs whole in the forward (torch's kernel normalises by the batch
statistics and updates the running statistics in place, once, as eager does). Its backward
must not call it again (that would update the running statistics a second time), so this
rule recomputes the batch statistics from the saved input and differentiates the
normalisation with prims: the formula of torch's native_batch_norm_backward, in float32 for
half-precision inputs, with the centred input (two-pass variance) for accuracy.
"""

from __future__ import annotations

import inspect
import math

import torch

from compiler.autograd.torch_rules import NoRule
from compiler.ir import Value
from compiler.ops import prims as P

RULES: dict = {}


def _batch_norm_signature(input, running_mean, running_var, weight=None, bias=None, training=False,
                          momentum=0.1, eps=1e-5): ...


_SIGNATURE = inspect.signature(_batch_norm_signature)


def _cast(x: Value, dtype) -> Value:
    return x if x.dtype == dtype else P.convert_element_type(x, dtype)


def batch_norm(b, cots):
    try:
        bound = _SIGNATURE.bind(*b.args, **b.kwargs)
    except TypeError as e:
        raise NoRule(str(e)) from e
    bound.apply_defaults()
    a = bound.arguments
    x, weight, bias, eps = a["input"], a["weight"], a["bias"], a["eps"]
    if not a["training"] or not isinstance(x, Value) or x.ndim < 2:
        raise NoRule("evaluation mode is decomposed")
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    dims = (0,) + tuple(range(2, x.ndim))
    channel = lambda v: P.broadcast_in_dim(v, x.shape, (1,))  # noqa: E731
    n = math.prod(x.shape[d] for d in dims)
    xc, g = _cast(x, compute), _cast(cots[0], compute)
    var, mean = P.var_mean(xc, dims, 0)
    rstd = P.rsqrt(P.add(var, eps))
    centred = P.sub(xc, channel(mean))
    xhat = P.mul(centred, channel(rstd))
    gxhat = P.mul(g, channel(_cast(weight, compute))) if isinstance(weight, Value) else g
    sum_g = P.sum(gxhat, dims)
    sum_gx = P.sum(P.mul(gxhat, xhat), dims)
    # dx = rstd * (gxhat - mean(gxhat) - xhat * mean(gxhat * xhat))
    inner = P.sub(P.sub(gxhat, channel(P.div(sum_g, float(n)))), P.mul(xhat, channel(P.div(sum_gx, float(n)))))
    pairs = [(x, _cast(P.mul(inner, channel(rstd)), x.dtype))]
    if isinstance(weight, Value):
        pairs.append((weight, _cast(P.sum(P.mul(g, xhat), dims), weight.dtype)))
    if isinstance(bias, Value):
        pairs.append((bias, _cast(P.sum(g, dims), bias.dtype)))
    return pairs


RULES["torch.nn.functional.batch_norm"] = batch_norm
