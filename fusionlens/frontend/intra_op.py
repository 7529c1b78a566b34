"""Ops on small tensors run on the calling thread only, not on torch's intra-op pool.

Some of torch's CPU kernels split even a tensor of a few elements across the intra-op threads
(softmax and layer_norm run a `parallel_for` over rows with a grain of one row; MKL's gemm), and
with OpenMP such an op waits for the pool's sleeping threads to wake after any pause: 5-16 ms on
a loaded 2-core machine, a thousand times the op's work. A jit's first call runs the user's ops
on real data twice, traced eagerly (eager's result, the check's reference) and as the checked
program (the call's result), so it paid that twice where eager pays it once. Where every tensor
an op reads (tracing), or every value of a program (the checked run, and each later call of a
small program that has such an op: `pipeline.on_one_thread`), holds at most `SMALL` elements,
the run uses one intra-op thread, as `torch.set_num_threads(1)` would: each row is one thread's
work either way, so the results are eager's; below `SMALL` torch's elementwise and reduction
kernels run on one thread anyway (at::internal::GRAIN_SIZE). The count is put back after each
op or program run (user code between ops sees its own), on the calling thread only (OpenMP's and
MKL's counts are per thread).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

SMALL = 32_768  # at::internal::GRAIN_SIZE: the elements below which torch's TensorIterator kernels never split

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a subclass: a fake tensor, a DTensor, a user's


# op families whose CPU kernels may compute differently with another thread count (MKL's and
# pocketfft's transforms, LAPACK): never switched, so their results stay eager's bits
_THREAD_VARIANT = ("fft", "linalg", "stft")


def thread_invariant(name: str) -> bool:
    """Whether an op (its symbol's name, or a torch callable's module and name) computes the
    same bits on one thread as on several: all but the families of _THREAD_VARIANT."""
    return not any(family in name for family in _THREAD_VARIANT)


def callable_name(func) -> str:
    return f"{getattr(func, '__module__', None) or ''}.{getattr(func, '__name__', '')}"


def small_ops(ops: Iterable) -> bool:
    """Whether every value the bound symbols `ops` make is static and at most SMALL elements and
    none of them is of a thread-variant family: a program of them may run on one thread."""
    ops = list(ops)
    return all(thread_invariant(b.sym.name) for b in ops) and \
        all(not v.symbolic and v.numel() <= SMALL for b in ops for v in b.outputs)


def small(tensors: Iterable) -> bool:
    """Whether there is a tensor among `tensors` and each is a plain (strided) CPU one of at
    most SMALL elements. A fake or meta tensor is never small: it runs no kernel, and its
    numel may be a symbol (a comparison would be a guard); a GPU tensor's kernels use no
    intra-op thread."""
    seen = False
    for t in tensors:
        if not isinstance(t, torch.Tensor):
            continue
        if type(t) not in _PLAIN or t.device.type != "cpu" or t.layout is not torch.strided or t.numel() > SMALL:
            return False
        seen = True
    return seen


class one_thread:
    """Inside the block, torch's intra-op thread count on this thread is 1 where `when` (and it
    was more); put back as it was after."""

    __slots__ = ("when", "before")

    def __init__(self, when: bool = True):
        self.when = when
        self.before = 1

    def __enter__(self):
        if self.when:
            self.before = torch.get_num_threads()
            if self.before > 1:
                torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.when and self.before > 1:
            torch.set_num_threads(self.before)
        return False
