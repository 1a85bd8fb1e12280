"""Every writer of a rollout batch refuses one that names an environment, evaluator or
generating checkpoint whose lineage fails (left25 finding 1): `record` did (lock24 finding 2),
but `Ledger.record_batch` from Python, the Gymnasium recorder, the Ray writer's workers and
`dataset create --from-failures` recorded through `ledger.artifacts.record_batch` unchecked.
Now `record_batch` judges what the batch names (`artifacts.NamedLineages`), and again under the
log's lock when another writer appended meanwhile. On test_approve_lineage.py's ledger, with a
second environment cartpole-b@1 and an evaluator judge@1.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_approve_lineage import home, home_template  # noqa: F401 (fixtures)
from test_lineage_under_lock import after_first_check, entries, prepared  # noqa: F401 (a fixture)

from trajledger import Ledger
from trajledger.verify.errors import PolicyError

STEPS = [
    {"episode_id": "ep-1", "step": t, "obs": [float(t)], "action": [float(t)],
     "reward": 1.0, "terminated": t == 1, "truncated": False}
    for t in range(2)
]  # fmt: skip


def by_api(ledger: Ledger) -> Any:
    return ledger.record_batch(STEPS, env="cartpole-b@1", evaluator="judge@1", policy="random",
                               key="vendor", name="api")


def by_gymnasium(ledger: Ledger) -> Any:
    import gymnasium as gym

    from trajledger.integrations.gymnasium import LedgerRecorder

    env = LedgerRecorder(gym.make("CartPole-v1"), ledger, env_ref="cartpole-b@1",
                         policy="random", signer=ledger.keys.signer("vendor"),
                         evaluator="judge@1", every=1000)
    env.reset(seed=3)
    done = False
    while not done:
        _obs, _r, terminated, truncated, _info = env.step(env.action_space.sample())
        done = terminated or truncated
    return env.flush()


WRITERS: dict[str, Callable[[Ledger], Any]] = {"api": by_api, "gymnasium": by_gymnasium}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("revoked", ["environment", "evaluator", None])
def test_a_batch_naming_a_revoked_artifact_is_not_recorded_by_any_writer(
        home: Path, writer: str, revoked: str | None) -> None:  # noqa: F811
    """On main each writer recorded the batch (it fails `verify` from its first day)."""
    ledger = prepared(home, revoked)
    before = entries(home)
    if revoked is None:
        WRITERS[writer](ledger)
        assert entries(home) == [*before, "rollout-batch"]
        return
    with pytest.raises(PolicyError) as e:
        WRITERS[writer](ledger)
    ref = "cartpole-b@1" if revoked == "environment" else "judge@1"
    got = str(e.value).splitlines()
    assert got[0] == f"{revoked} {ref}: its lineage fails, 1 problem(s); nothing was recorded"
    assert "revoked: wrong physics" in got[1], got
    assert len(got) == 2, got
    assert entries(home) == before


def test_a_revocation_appended_after_a_python_writer_s_check_is_seen(
        home: Path, after_first_check: Callable[[Callable[[], Any]], None]) -> None:  # noqa: F811
    """Judged again under the log's lock: the revocation another writer appends between the
    check and the append is seen (the `record` command's rule, lock24 finding 1)."""
    ledger = prepared(home, None)
    after_first_check(lambda: Ledger.open(home).revoke("cartpole-b@1", key="vendor",
                                                       reason="wrong physics"))
    before = entries(home)
    with pytest.raises(PolicyError, match="environment cartpole-b@1: its lineage fails"):
        by_api(ledger)
    assert entries(home) == [*before, "revocation"]
