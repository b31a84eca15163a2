"""`python -m benchmarks [--quick] [--out DIR] [--case N ...]`."""

from .run import main

main()
