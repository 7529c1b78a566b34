"""Sample calls of every supported torch-level op, for the differential op tests.

Each `Sample` is a small user function (the op as a user writes it: a function, a Tensor
method, an operator) and a recipe for its arguments. Arguments are made fresh, from the
global torch RNG, for each dtype: several shapes, broadcasting, python scalars,
non-contiguous (transposed, strided) and zero-size tensors.

The recipes, `Sample` and the registry live in tests/samples_common.py; the samples
themselves in one file per op family (tests/samples_*.py), imported below in a fixed order:
the order of SAMPLES, hence of the test ids and of docs/ops.md. Import from here.

`python tests/op_samples.py --markdown` prints docs/ops.md (tests/ops_doc.py): every
torch-level symbol, the torch callables that map to it, and the prims its samples decompose into.
"""

from __future__ import annotations

import sys

import torch

from samples_common import (
    BF16, F16, F32, FLOATS, FLOATS_OR_SKIP, ONLY_F32, SAMPLES, Sample, T, _Seen, bools, cl, clone_args, each,
    funcs_called, ints, nt, pos, sample, sl, t,
)

__all__ = ["BF16", "F16", "F32", "FLOATS", "FLOATS_OR_SKIP", "ONLY_F32", "SAMPLES", "Sample", "T", "_Seen", "bools",
           "cl", "clone_args", "each", "funcs_called", "ints", "markdown", "nt", "pos", "sample", "sl", "t"]

# The order of these imports is the order of SAMPLES (each appends its samples when imported).
import samples_pointwise  # noqa: E402  elementwise binary/unary, where/clamp, activations, conversions
import samples_shapes  # noqa: E402  views and shape ops, factories
import samples_reductions  # noqa: E402
import samples_nn  # noqa: E402  normalisation, softmax, losses, library calls, pooling, resampling
import samples_indexing  # noqa: E402  in-place ops, indexing, layout
import samples_special  # noqa: E402  elementwise math, summaries, scans, sorts
import samples_linalg  # noqa: E402  linear algebra, attention, complex/FFT, creation

FAMILIES = (samples_pointwise, samples_shapes, samples_reductions, samples_nn, samples_indexing, samples_special,
            samples_linalg)


def markdown() -> str:
    """docs/ops.md."""
    import ops_doc

    return ops_doc.markdown(SAMPLES)


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        torch.manual_seed(0)
        sys.stdout.write(markdown())
    else:
        print(f"{len(SAMPLES)} samples; `--markdown` prints docs/ops.md")
