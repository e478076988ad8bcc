"""Fixtures for virtual phones (owned by the virtual-phone area)."""
