"""Complex numbers and Fourier transforms, run whole: the complex conversions (cfloat,
view_as_complex, polar, ...), their parts (real, conj, resolve_conj, ...), torch.fft and
stft; and the small integer conversions conversions.py lacks (byte, char, short),
decomposed as casts."""

from __future__ import annotations

import torch

from fusionlens.ops.torch_ops.common import cast
from fusionlens.ops.torch_ops.registry import library, register


def _to(dtype):
    def decomposition(input, memory_format=torch.preserve_format):
        return cast(input, dtype)
    return decomposition


byte = register(torch.Tensor.byte, name="torch.Tensor.byte")(_to(torch.uint8))
char = register(torch.Tensor.char, name="torch.Tensor.char")(_to(torch.int8))
short = register(torch.Tensor.short, name="torch.Tensor.short")(_to(torch.int16))

COMPLEX = {n: library(getattr(torch.Tensor, n), name=f"torch.Tensor.{n}") for n in ("cfloat", "cdouble", "chalf")}
# (Tensor.real and Tensor.imag are properties: the frontend never sees them as calls)
def _method(n: str) -> list:
    return [getattr(torch.Tensor, n)] if hasattr(torch.Tensor, n) and n not in ("real", "imag") else []


PARTS = {n: library(getattr(torch, n), *_method(n))
         for n in ("view_as_complex", "view_as_real", "complex", "polar", "real", "imag", "conj", "conj_physical",
                   "resolve_conj", "resolve_neg")}
FFT = {n: library(getattr(torch.fft, n)) for n in (
    "fft", "fft2", "fftn", "ifft", "ifft2", "ifftn", "rfft", "rfft2", "rfftn", "irfft", "irfft2", "irfftn",
    "hfft", "hfft2", "hfftn", "ihfft", "ihfft2", "ihfftn", "fftshift", "ifftshift")}
stft = library(torch.stft, torch.Tensor.stft)
istft = library(torch.istft, torch.Tensor.istft)
