"""shimgen's benchmark suite: what the shim costs, measured against the real driver.

``python -m benchmarks`` is the one entry point (see ``benchmarks/suite.py`` and
docs/performance.md). ``benchmarks/gpu_step.py`` is the GPU part, run on a GPU machine only.
"""
