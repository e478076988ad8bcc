"""Artifacts the harness measures with: engine builds, models and the caches that hold them."""
