"""``python -m tilake.synth``: the synthetic capture generator's command line."""
import sys

from tilake.synth import _cli

sys.exit(_cli())
