"""Benchmarks, run by `make bench`; not tests. Each module prints its figures; docs/benchmarks.md records them.

`bench.outage`: a virtual-time simulation of a downstream outage under the retry policies and the circuit breaker.
"""
