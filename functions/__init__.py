"""Everything that runs inside the worker Lambda: the catalog, the generic runtime and the jobs.

Nothing here imports `infra` or `jobctl`; both of those import from here.
"""
