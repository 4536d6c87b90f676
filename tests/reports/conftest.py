"""The report tests read the bundled example run: ``example_run`` (tests/conftest.py, one per session)."""
