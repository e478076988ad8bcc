"""Analysis of stored trials: A/B comparison of builds, gates, and change points in history.

Everything in this package below the CLI is a pure function over arrays: no I/O, no clocks, and
every random draw comes from a seeded ``numpy.random.Generator`` so a verdict is reproducible.
"""
