"""Fixtures of the site tests (defined in ``sitefixtures``)."""

from __future__ import annotations

from sitefixtures import farm_site, farm_store

__all__ = ["farm_site", "farm_store"]
