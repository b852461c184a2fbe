"""`python -m benchmarks`: the benchmark suite (benchmarks/suite.py)."""

from .suite import main

raise SystemExit(main())
