"""Export a recorded rollout batch as data files: a Minari dataset, plain Parquet or JSONL.

Scope: `export_batch` resolves a rollout batch, reads its files from the store verified against
their digests, reads the batch's record (spaces, spec, source metadata) and its environment's,
and calls ``ledger.rollouts.export.export_rollouts``.
Non-scope: evidence bundles (``ledger.exchange``): these files carry the data, not the proof;
the batch digest printed with them names the evidence.
Spec: ``schemas/rollout.v3.md`` section "Export".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trajledger.verify.errors import FormatError, PolicyError

from .catalog import Catalog
from .errors import LedgerError

if TYPE_CHECKING:
    from .home import LedgerHome
    from .rollouts.export import ExportResult

__all__ = ["export_batch"]


def _predicate(ledger: LedgerHome, envelope: str) -> dict[str, Any]:
    from trajledger.verify.dsse import Envelope
    from trajledger.verify.errors import ProvenanceError
    from trajledger.verify.statement import Statement

    try:
        statement = Statement.from_bytes(Envelope.from_bytes(ledger.store.get(envelope)).payload)
    except ProvenanceError as e:
        raise LedgerError(f"envelope {envelope}: cannot be read: {e}") from e
    return dict(statement.predicate)


def export_batch(
    ledger: LedgerHome,
    ref: str,
    out: Path,
    fmt: str,
    *,
    minari_format: str = "hdf5",
    dataset_id: str | None = None,
) -> tuple[str, ExportResult]:
    """Write the rollout batch ``ref`` into the new directory ``out`` in ``fmt``.

    Steps:
      1. Resolve ``ref`` to a rollout batch; read its record and its environment's.
      2. Read ``steps.parquet`` and ``episodes.parquet`` from the store, each checked against
         its digest (an erased batch has no data to export).
      3. Write the format (``ledger.rollouts.export``).

    Returns:
        The batch digest and what was written.

    Raises:
        RefError: ``ref`` names no rollout batch (or several).
        LedgerError: the batch's data is missing or erased, or a record cannot be read.
        PolicyError: the batch is sealed (only an evaluation opens it).
        TamperError / DigestMismatchError: a blob does not hash to its digest.
        FormatError: the batch cannot be written in ``fmt`` (the message says why).
    """
    from .artifacts import batch_files
    from .rollouts.export import ExportError, export_rollouts

    # (1)
    catalog = Catalog(ledger)
    item = catalog.resolve(ref, {"rollout-batch"})
    record = _predicate(ledger, item.envelope)
    env_digest = (record.get("environment") or {}).get("digest")
    environment: dict[str, Any] = {}
    if env_digest:
        for env in catalog.by_kind("environment"):
            if env.digest == env_digest:
                environment = _predicate(ledger, env.envelope)
    if "sealed" in record:
        raise PolicyError(
            f"rollout batch {item.ref}: sealed (stored encrypted to the evaluators' X25519 keys, "
            "a held-out suite); only 'trajledger eval' with an evaluator key opens it"
        )
    # (2)
    files = batch_files(ledger, item.digest)
    data = {}
    for name in ("steps.parquet", "episodes.parquet"):
        digest = files.get(name)
        if digest is None or not ledger.store.exists(digest):
            raise LedgerError(
                f"rollout batch {item.digest}: {name} is not in the store (erased, or not "
                "imported with data); nothing to export"
            )
        data[name] = ledger.store.get_verified(digest)
    # (3)
    try:
        result = export_rollouts(
            data["steps.parquet"],
            data["episodes.parquet"],
            record,
            out,
            fmt,
            environment=environment,
            minari_format=minari_format,
            dataset_id=dataset_id,
        )
    except ExportError as e:
        raise FormatError(f"rollout batch {item.ref}: {e}") from e
    except (FileExistsError, FileNotFoundError) as e:
        raise LedgerError(str(e)) from e
    return item.digest, result
