"""The end-to-end tests' own setup.

``tamperkit.py`` holds the helpers the tamper tests share (test_tamper_sweep.py,
test_tamper_matrix.py, test_read_only.py); they ``import tamperkit``. ``--import-mode=importlib``
puts no test directory on ``sys.path``, so this directory is put there, once.

Quickstart ledgers, built once per session (per xdist worker) for the modules that start from
one (each copies what it uses, or extends a copy in a user state of its own:
`testkit.extend_template`, `testkit.user_state`):

- ``quickstart_template``: ``trajledger quickstart --episodes 10``, keys in the clear; its value
  is the final checkpoint's digest.
- ``secured_quickstart``: `tamperkit.build_quickstart` (keys encrypted under
  ``tamperkit.PASSPHRASE``, its user's state beside it); tests copy it, never use it in place.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

import tamperkit as tk  # noqa: E402
import testkit  # noqa: E402


@pytest.fixture(scope="session")
def quickstart_template(tmp_path_factory: pytest.TempPathFactory) -> testkit.Template[str]:
    return testkit.build_template(tmp_path_factory.mktemp("quickstart"), testkit.quickstart)


@pytest.fixture(scope="session")
def secured_quickstart(tmp_path_factory: pytest.TempPathFactory) -> tk.Quickstart:
    return tk.build_quickstart(tmp_path_factory.mktemp("secured-quickstart"))
