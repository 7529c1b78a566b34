"""Helpers around the Triton code generator (compiler/executors/triton_executor.py).

`groups.group_from_fn` turns a small function into one FusionGroup without the fusion
pass, for tests and benchmarks of the generator alone.
"""
