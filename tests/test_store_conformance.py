"""Runs the store conformance suite (tests/store_conformance.py) on every backend
(the parametrised `backend` fixture lives in tests/conftest.py)."""

from __future__ import annotations

from tests.store_conformance import StoreConformance
from tests.store_story_conformance import StoryConformance


class TestStoreConformance(StoreConformance):
    pass


class TestStoryConformance(StoryConformance):
    pass
