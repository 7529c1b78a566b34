"""Accuracy of a compiled result judged against a float64 reference, the way torch._dynamo's
accuracy checker does it (torch/_dynamo/utils.py `same(ref, res, fp64_ref, tol=...)`).

Why not compare float32 with float32. Eager float32 is not the truth: it is one rounding of
it, and a compiler that sums in another order is another. Where a result is ill-conditioned
the two roundings differ by far more than a float32 tolerance, though both are as close to
the exact value as float32 allows. Gradients of BatchNorm CNNs are such results. The backward
of a normalisation subtracts nearly equal sums (mean(g), mean(g * xhat)) and divides by the
batch's standard deviation: with few values a channel (a 1x1 feature map, a small batch) the
rounding of a late layer's gradient is amplified in every earlier one (at a batch of 2, eager
float32's gradients of efficientnet_b0 are ~100% off float64's). And a ReLU makes a gradient
jump where its input crosses 0: two roundings that put one unit on either side of it differ
by that unit's whole contribution. An elementwise float32 tolerance either fails a compiler
that is as accurate as eager there, or is loose everywhere else.

So, as dynamo does, both are compared with a float64 run of the same model on the same
inputs: the compiled result passes when it is no further from the float64 result than a
small multiple of eager float32's own distance from it. One departure from dynamo: its
absolute terms (allclose's atol=tol and the floor tol/10 added to the RMSE bound) assume
values of order one, and gradients are not (a parameter's gradient can be 1e-4 everywhere,
and an absolute 1e-5 would then accept any gradient at all). Here they are relative: the
allclose shortcut's atol is tol times the reference's largest magnitude, and the floor is
tol/10 times `scale`, the magnitude of the whole set being compared (for gradients, the RMS
of all the model's float64 gradients together: the noise of a gradient whose exact value is
zero, a bias just before a BatchNorm, is the size of the terms it sums, not its own).

Its limit, as dynamo's. The bound is as tight as eager float32 is accurate, and eager is least
accurate at a kink: where a ReLU's input is within float32's rounding of 0, float64 can land
on the other side of it than both float32 runs (which share their convolutions' rounding:
those are the same torch calls), and eager's "own error" is then that kink's. For resnet18 in
train mode at a batch of 8, about half of the random draws have one. Scaling one compiled
gradient by 1.001 is then caught in 3 to 36 of its 63 tensors (63 without a kink), by 1.01 in
36 to 40, by 1.1 in all 63 (measured).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

TOL = 1e-4  # checking.TOLERANCES[torch.float32], and dynamo's default tol


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return math.sqrt(float(torch.mean(torch.square(a.double() - b.double())))) if a.numel() else 0.0


def rms(tensors) -> float:
    """The root mean square of the elements of all `tensors` together (0 for none)."""
    tensors = [t.detach().double().reshape(-1) for t in tensors if t is not None and t.numel()]
    return rmse(torch.cat(tensors), torch.zeros(())) if tensors else 0.0


def multiplier(ref: torch.Tensor) -> float:
    """dynamo's get_multiplier for float32: 3 for small tensors and 1x1 feature maps (noise
    dominates the error there), else 2."""
    small = ref.numel() < 1000 or (ref.ndim == 4 and ref.shape[-1] == ref.shape[-2] == 1)
    return 3.0 if small else 2.0


def accuracy_problem(res, ref, fp64_ref, tol: float = TOL, scale: Optional[float] = None) -> Optional[str]:
    """None when `res` (the compiled float32 result) is as accurate as `ref` (eager float32),
    both judged against `fp64_ref` (eager on a float64 copy of the model and inputs); else why
    not, in words. `scale`: the magnitude the absolute floor is relative to (see the module
    docstring); by default the RMS of `fp64_ref` itself. Integer tensors (num_batches_tracked)
    must be equal. None for all three (an unused parameter) passes; None for some does not."""
    if ref is None or res is None or fp64_ref is None:
        if ref is None and res is None and fp64_ref is None:
            return None
        return f"missing: compiled {_kind(res)}, eager {_kind(ref)}, float64 {_kind(fp64_ref)}"
    if res.shape != ref.shape or res.dtype != ref.dtype:
        return f"compiled gives {res.dtype}{list(res.shape)}, eager {ref.dtype}{list(ref.shape)}"
    res, ref, fp64_ref = res.detach(), ref.detach(), fp64_ref.detach()
    if not ref.is_floating_point():
        if torch.equal(res, ref) and torch.equal(res, fp64_ref.to(res.dtype)):
            return None
        return f"integers differ: compiled {_show(res)}, eager {_show(ref)}, float64 run {_show(fp64_ref)}"
    if not bool(torch.isfinite(res).all()):
        return f"{int((~torch.isfinite(res)).sum())} of {res.numel()} compiled elements are not finite"
    if not bool(torch.isfinite(fp64_ref).all()) or not bool(torch.isfinite(ref).all()):
        return "the reference is not finite: nothing to judge by"
    peak = float(fp64_ref.abs().max()) if fp64_ref.numel() else 0.0
    if torch.allclose(res, ref, rtol=tol, atol=tol * peak):  # dynamo's first test, relative here
        return None
    scale = rms([fp64_ref]) if scale is None else scale
    ref_error, res_error = rmse(fp64_ref, ref), rmse(fp64_ref, res)
    m = multiplier(ref)
    bound = m * ref_error + tol / 10 * scale
    if res_error <= bound:
        return None
    return (f"RMSE vs float64 {res_error:.3g} > {m:g} x eager float32's {ref_error:.3g} + {tol / 10:g} x "
            f"scale {scale:.3g} (largest |compiled - eager| {float((res.double() - ref.double()).abs().max()):.3g}, "
            f"largest |float64| {peak:.3g})")


def _show(t: torch.Tensor) -> str:
    return str(t.tolist()) if t.numel() < 8 else f"{t.dtype}{list(t.shape)}"


def _kind(t) -> str:
    return "None" if t is None else f"{t.dtype}{list(t.shape)}"


def problems(res: dict, ref: dict, fp64_ref: dict, tol: float = TOL, scale: Optional[float] = None) -> list:
    """'name: problem' for each name of `ref` whose tensors fail `accuracy_problem`; a name
    missing from one of the three dicts is a problem too."""
    out = []
    for name in sorted(set(res) | set(ref) | set(fp64_ref)):
        if not (name in res and name in ref and name in fp64_ref):
            out.append(f"{name}: not in all three of compiled, eager, float64")
            continue
        p = accuracy_problem(res[name], ref[name], fp64_ref[name], tol, scale)
        if p:
            out.append(f"{name}: {p}")
    return out
