"""The end-to-end tests' own setup.

``tamperkit.py`` holds the helpers the tamper tests share (test_tamper_sweep.py,
test_tamper_matrix.py, test_read_only.py); they ``import tamperkit``. ``--import-mode=importlib``
puts no test directory on ``sys.path``, so this directory is put there, once.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
