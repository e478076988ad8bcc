"""Executing a plan on devices: ordering, cooldown, sampling, outcome classification."""
