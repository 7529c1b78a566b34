"""Torch callables FusionLens has no symbol for, whose meaning still matters: the frontend
records each as one opaque call, tagged with `fallback_tags(the callable the user called)`.

Only randomness matters so far: a program that draws random numbers is checked against eager
by shapes and dtypes only, and has no backward that could replay its draws. The table lists
the callables themselves (in-place methods, nn.init functions, the dropouts torch runs as
one kernel), not names: what draws is known, not guessed from a name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn import init

from compiler.ir import OpTag

RANDOM_FALLBACKS: frozenset[Callable] = frozenset({
    # in-place draws into a tensor (the frontend records the functional form of each)
    torch.Tensor.bernoulli_, torch.Tensor.cauchy_, torch.Tensor.exponential_, torch.Tensor.geometric_,
    torch.Tensor.log_normal_, torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.random_,
    # dropouts with no decomposition (F.dropout has one: activations.dropout)
    F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout, F.feature_alpha_dropout,
    torch.alpha_dropout, torch.alpha_dropout_, torch.feature_dropout, torch.feature_dropout_,
    torch.feature_alpha_dropout, torch.feature_alpha_dropout_, torch.dropout_,
    # random in training mode (F.rrelu is a symbol: activations.rrelu)
    F.rrelu_, torch.rrelu_,
    # sampling inside an op
    F.gumbel_softmax, F.fractional_max_pool2d, F.fractional_max_pool3d,
    F.fractional_max_pool2d_with_indices, F.fractional_max_pool3d_with_indices,
    # torch.distributions' samplers
    torch.binomial, torch._standard_gamma, torch._sample_dirichlet,
    # weight initialisation
    init.uniform_, init.normal_, init.trunc_normal_, init.xavier_uniform_, init.xavier_normal_,
    init.kaiming_uniform_, init.kaiming_normal_, init.orthogonal_, init.sparse_,
})


def fallback_tags(func: Callable) -> frozenset[OpTag]:
    """The tags of an opaque call of torch callable `func` (one that has no symbol)."""
    if func in RANDOM_FALLBACKS:
        return frozenset({OpTag.LIBRARY_CALL, OpTag.RANDOM})
    return frozenset({OpTag.LIBRARY_CALL})
