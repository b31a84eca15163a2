"""Benchmarks of issue 8: the middleware against the bare app and the JSON floor, run by `python -m benchmarks`.

Every figure is a ratio of paired, interleaved runs made in the same process, because the machines
these run on are shared and noisy: a lone absolute time would say more about the neighbours than the code.
"""
