"""Torch-level symbols: what the frontend records, and how each decomposes into prims.

Each symbol stands for one torch function (its `impl`, also its printed name) and every
alias that means the same (Tensor methods, operators, torch.nn.functional). Its
decomposition is a plain function over Values that calls prims and other symbols, with
torch's own signature, so a recorded call binds to it unchanged. A symbol with no
decomposition is a library call (matmul, linear, SDPA, ...): executors run it as a whole.
A decomposition raises NoDecomposition for argument combinations it does not cover; the op
then stays a library call too.

The package, one module a family of ops, each building only on those above it:
- registry: REGISTRY and SYMBOLS, register / library / lookup, qualified_name, adapters; INPLACE (the
  functional forms of in-place methods that have no functional method) and library_part
- common: helpers over Values and numbers (result_dtype, cast, broadcast_to_shape,
  elementwise, reduction, opmath, ...)
- pointwise: elementwise binary and unary ops, comparisons, where, clamp, lerp, ...
- activations: relu, gelu, silu, softplus, ..., dropout
- conversions: to, type_as, float() and friends, contiguous, clone, detach
- shapes: reshape, permute, expand, indexing and slicing, split, cat, stack, tril/triu
- factories: full, ones, zeros, *_like, arange
- reductions: sum, mean, max/min, argmax, var/std, logsumexp, vector_norm
- normalization: softmax (softmin, safe softmax, its backward), log_softmax, layer_norm, rms_norm,
  normalize, the batch/instance/group norms and aten's native forms, local_response_norm
- losses: nll_loss, cross_entropy (weights, smoothing, probabilities), the regression, binary,
  divergence and margin losses; ctc_loss (run whole)
- distances: cosine_similarity, pairwise_distance, pdist and the losses over them
- flops: the FLOPs formulas of library calls (each symbol is given its own at registration)
- library_calls: matmul, linear, SDPA, conv1d/conv2d, grouped and sparse matmuls, ... (run
  whole); bilinear (an einsum)
- attention: SDPA's fused CPU kernel and its backward as library calls of their own (a training
  forward's; not registered for a torch callable), and whether eager's dispatcher picks them
- convolution: conv3d, conv_transpose1d/2d/3d (run whole)
- pooling: adaptive_avg_pool (a mean, or masked sums where windows are unequal), max_unpool
  (a scatter), max/avg/adaptive_max/fractional pooling (run whole)
- resampling: interpolate and grid_sample (run whole; what nn.Upsample and F.upsample* call)
- indexing ... creation: gathers, layout ops (flips, pads of every mode, gradient, resize),
  elementwise math, statistics, scans, linear algebra, FFTs, factories and random draws
- rearrange: pixel and channel shuffles, F.unfold (im2col)
- fallbacks: the tags of torch callables with no symbol (which of them draw random numbers)

Symbols register when their module is imported; the imports below keep the order of
REGISTRY and SYMBOLS (lookups, docs/ops.md) fixed.
"""

from fusionlens.ops.torch_ops import registry, common  # noqa: F401  (the base: imported first)
from fusionlens.ops.torch_ops import pointwise, activations, conversions, shapes, factories  # noqa: F401
from fusionlens.ops.torch_ops import reductions, normalization, losses, distances, library_calls  # noqa: F401
from fusionlens.ops.torch_ops import convolution, pooling, resampling  # noqa: F401
from fusionlens.ops.torch_ops import indexing, layout, special, statistics, scans, linalg, spectral, creation  # noqa: F401
from fusionlens.ops.torch_ops import rearrange, attention  # noqa: F401
from fusionlens.ops.torch_ops.common import (broadcast_to_shape, cast, cast_result, elementwise, kept_dtype, opmath,
                                             reduction, result_dtype)
from fusionlens.ops.torch_ops.fallbacks import RANDOM_FALLBACKS, fallback_tags
from fusionlens.ops.torch_ops.registry import (INPLACE, LIBRARY, REGISTRY, SYMBOLS, NoDecomposition, library, lookup,
                                               lookup_inplace, qualified_name, register, registered, symbol_for)

__all__ = [
    "INPLACE", "LIBRARY", "RANDOM_FALLBACKS", "REGISTRY", "SYMBOLS", "NoDecomposition", "fallback_tags", "library",
    "lookup", "lookup_inplace", "qualified_name", "register", "registered", "symbol_for", "broadcast_to_shape",
    "cast", "cast_result", "elementwise", "kept_dtype", "opmath", "reduction", "result_dtype",
]
