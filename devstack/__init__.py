"""Local-only tooling, never deployed: the moto stack from template.yaml, the route gateway, the
simulated model, seed data, tokens and the demo.

The layer's package is put on the path the way Lambda puts a layer on /opt/python, so
``python -m devstack`` works without extra setup.
"""

import sys
from pathlib import Path

_LAYER = str(Path(__file__).resolve().parent.parent / "layers" / "common")
if _LAYER not in sys.path:
    sys.path.insert(0, _LAYER)
