"""Runs the pipeline and everything around it: `pipeline` (the stages in order), `api`
(compile), `jit_cache` (jit), `fast_path` (a cached jit call as generated code), `targets` (a
file's targets), `checking` and `benchmark` (against eager), `timing`, `reporting` (the report
assembled), `wire` (the compiler's vocabulary as the report's strings: the one boundary),
`repro` (one region as a script),
`launch` (N ranks of a target).

Invariant: the only package that runs user code and the stages together; the CLI and the
language server's worker are its only callers.
"""
