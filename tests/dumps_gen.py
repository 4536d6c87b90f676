"""Compatibility name for the bug-fixture reproducers (``TILAKE_TESTS_DIR=<checkout>/tests``).

``shared/fixtures/bugs/_gen_common.py`` imports ``dumps_gen`` and uses ``Cfg``, ``prompt``,
``weights``, ``dump_train`` and ``dump_infer``; the generator now lives in
``tests/fixtures/msprobe_writer.py``. Not a test module (pytest collects ``test_*.py`` only).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))

from msprobe_writer import *  # noqa: E402,F401,F403
from msprobe_writer import Cfg, dump_infer, dump_train, prompt, weights  # noqa: E402,F401
