"""Compatibility name for the bug-fixture reproducers (``TILAKE_TESTS_DIR=<checkout>/tests``).

``shared/fixtures/bugs/_common.py`` imports ``dumps_mini.write_dump``/``write_map``; the writers now
live in ``tests/fixtures/msprobe_mini.py``. Not a test module (pytest collects ``test_*.py`` only).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))

from msprobe_mini import *  # noqa: E402,F401,F403
from msprobe_mini import tensor_json, write_dump, write_map  # noqa: E402,F401
