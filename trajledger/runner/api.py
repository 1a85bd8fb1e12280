"""Deprecated: ``trajledger.runner.api.Ledger`` is `trajledger.Ledger` (``trajledger/api.py``).

Kept for one release (0.3): reading ``Ledger`` here warns (`DeprecationWarning`) and gives the
one `trajledger.Ledger` class; import it as ``from trajledger import Ledger``. It stands with the
commands, above the facade it names (tests/unit/test_layering.py, ``FLOORS``), and goes with the
alias.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name == "Ledger":
        warnings.warn(
            "trajledger.runner.api.Ledger is deprecated and goes in the next release: use "
            "'from trajledger import Ledger' (the same class)",
            DeprecationWarning,
            stacklevel=2,
        )
        from trajledger.api import Ledger

        return Ledger
    raise AttributeError(f"module 'trajledger.runner.api' has no attribute {name!r}")
