"""Raw lake tables written by the msprobe dump reader (owned by the dump-analysis code).

Merged into :data:`tilake.ingest.schema.TABLES` / ``PARTITIONS`` at import time.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

DUMP_TABLES: Dict[str, List[Tuple[str, str]]] = {}
DUMP_PARTITIONS: Dict[str, List[str]] = {}
