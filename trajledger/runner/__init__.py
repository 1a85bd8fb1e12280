"""trajledger's runner: the admission gate, trainers, checkpoints and rollouts from them."""

from __future__ import annotations

__all__: list[str] = []
