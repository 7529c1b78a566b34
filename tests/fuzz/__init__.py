"""FusionLens's differential fuzzer (issue 21; docs/fuzzing.md).

Random straight-line PyTorch programs, one a seed (`generate.generate`), each compiled once
by `compiler.jit` and called three times (new values; other strides on the second call) in a
mode (`modes.MODES`: default executors, Triton under its interpreter, backward), judged
against eager with the float64 rule (`judge.check`). A failing program is shrunk
(`shrink.shrink`) and written out as a standalone script (`script.script`).

    python -m tests.fuzz --programs 5000 --seed 0 --out /tmp/fuzz     # the nightly run
"""
