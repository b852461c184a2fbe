"""Tools for developing shimgen, apart from the product: not installed with it. Tests and
benchmarks import them from the repository root (`import devtools.driverfetch`); pytest
puts the root on sys.path (pyproject's pythonpath), and `python -m benchmarks` runs there.
"""
