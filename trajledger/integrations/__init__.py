"""Integrations of trajledger with RL tooling.

Scope: adapters that record what other libraries produce, through ``trajledger.ledger``.
``trajledger.integrations.gymnasium``: `LedgerRecorder`, a Gymnasium wrapper (of one environment,
or of a vector environment) that records every step and writes a signed, logged rollout batch
every N episodes.
``trajledger.integrations.ray``: `LedgerWriter`, one writer actor per ledger through which a Ray
rollout fleet records batches (blobs written by the workers, appends funnelled to the writer);
needs the ``ray`` extra.

Layer: above ``trajledger.ledger`` (which never imports this package).

Each integration imports its library when its module is imported; this package imports none.
"""

from __future__ import annotations

__all__: list[str] = []
