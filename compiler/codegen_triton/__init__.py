"""Helpers around the Triton code generator (compiler/executors/triton_executor.py):
`aot` compiles generated kernels for a GPU target without a GPU."""
