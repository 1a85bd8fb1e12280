"""trajledger: a provenance-first ledger for reinforcement-learning rollouts.

The installed packages live under this one name:

- ``trajledger.verify``  formats and verification (stdlib + ``cryptography``; a copy of the
  directory ``trajledger/verify/`` also runs on its own as ``python -m verify``)
- ``trajledger.ledger``  the write side: keys, object store, log, recording, index, exchange
- ``trajledger.runner``  the admission gate, trainers, checkpoints, rollouts; the ``trajledger``
  command

``from trajledger import Ledger`` is the front door. Importing this package loads nothing else:
names are resolved on first use, so ``trajledger --help`` and ``trajledger.verify`` stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import Ledger

__all__ = ["Ledger"]


def __dir__() -> list[str]:
    """The module's names and ``Ledger``, which ``help(trajledger)`` then lists (out40)."""
    return sorted({*globals(), "Ledger"})


def __getattr__(name: str) -> Any:
    if name == "Ledger":
        from .api import Ledger

        return Ledger
    raise AttributeError(f"module 'trajledger' has no attribute {name!r}")
