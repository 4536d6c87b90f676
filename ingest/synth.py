"""Compatibility name: ``python -m tilake.ingest.synth`` runs :mod:`tilake.synth`'s command line.

The synthetic capture generator lived here before the rooms-by-role layout moved it to
``tilake.synth``. Reproducer scripts written against the old name (the bug and break-test
fixtures call ``python -m tilake.ingest.synth profiler-output|big-db …``) keep working; new code
imports :mod:`tilake.synth`. Nothing in tilake imports this module.
"""
import sys

if __name__ == "__main__":
    from tilake.synth import _cli

    sys.exit(_cli())
