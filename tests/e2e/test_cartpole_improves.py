"""Two iterations of filtered behaviour cloning on CartPole beat the random policy.

The library path the ``trajledger train`` / ``rollout`` commands wrap, without the ledger:
random rollouts -> ``bc`` on the top half -> rollouts of that policy -> ``bc`` on the union ->
evaluation. Every seed is fixed; the returns are measured here, not assumed. Runs in ~2 s.
"""

from __future__ import annotations

import pyarrow as pa

from trajledger.runner.rollouts import RolloutResult, run_policy
from trajledger.runner.trainers import TrainingData, load_policy, load_trainer

ENV = "CartPole-v1"
EVAL_SEED = 10_000
EVAL_EPISODES = 30


def data_of(*batches: RolloutResult) -> TrainingData:
    return TrainingData(
        steps=pa.concat_tables([b.steps for b in batches]),
        episodes=pa.concat_tables([b.episodes for b in batches]),
    )


def test_second_iteration_beats_random() -> None:
    trainer = load_trainer("bc")
    config = {"top_fraction": 0.5}

    random_batch = run_policy(None, ENV, 100, 0, policy_version="random")
    random_eval = run_policy(None, ENV, EVAL_EPISODES, EVAL_SEED, policy_version="random")

    first = trainer.train(data_of(random_batch), config, seed=1)
    policy_1 = load_policy(first.files)
    batch_1 = run_policy(policy_1, ENV, 50, 1_000, policy_version="iteration-1")
    eval_1 = run_policy(policy_1, ENV, EVAL_EPISODES, EVAL_SEED, policy_version="iteration-1")

    second = trainer.train(data_of(random_batch, batch_1), config, seed=2)
    policy_2 = load_policy(second.files)
    eval_2 = run_policy(policy_2, ENV, EVAL_EPISODES, EVAL_SEED, policy_version="iteration-2")

    print(
        f"CartPole-v1 mean return over {EVAL_EPISODES} episodes (seeds {EVAL_SEED}..): "
        f"random {random_eval.mean_return:.1f}, iteration 1 {eval_1.mean_return:.1f}, "
        f"iteration 2 {eval_2.mean_return:.1f}"
    )
    assert second.metrics["episodes_total"] == 150
    assert second.metrics["mean_return_kept"] > first.metrics["mean_return_kept"]
    assert eval_1.mean_return > random_eval.mean_return
    assert eval_2.mean_return > random_eval.mean_return
