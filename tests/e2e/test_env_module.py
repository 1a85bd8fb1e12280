"""End to end: an imported environment's Gymnasium id does not choose a module to import (fix10).

rev11's limit "A Gymnasium id in a signed environment record chooses a module to import":
``gymnasium.make("module:Env-v0")`` imports ``module``, so a vendor's environment record, once
imported, made the buyer's ``rollout`` (and ``eval`` of a suite) import any installed module.
Here the vendor registers ``fix10_mark_env:CartPole-v1``, a module that leaves a mark file when
imported; the buyer imports the vendor's bundles and plays the vendor's checkpoint in it. Before
fix10 the rollout ran (exit 0) and the mark was there; now it is refused (exit 1) unless
``--allow-env-module fix10_mark_env`` names the module, and the buyer's own records pass as
before."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import testkit

from trajledger import Ledger
from trajledger.ledger.catalog import origin_name

MODULE = "fix10_mark_env"
GYM_ID = f"{MODULE}:CartPole-v1"


run = testkit.invoke


class World:
    def __init__(self, root: Path, quickstart: testkit.Template[str]) -> None:
        from trajledger.runner.rollouts import run_policy

        vendor = testkit.copy_template(quickstart, root / "vendor")
        self.checkpoint = quickstart.value
        ledger = Ledger.open(vendor)
        ledger.register_environment("custom", "1", key="vendor", gym_id=GYM_ID)
        # A regression suite played in it (CartPole's seeds, recorded under custom@1).
        played = run_policy(None, "CartPole-v1", 2, 500, policy_version="random")
        batch = ledger.record_batch(played.steps, episodes=played.episodes, env="custom@1",
                                    policy="random", key="vendor", name="suite-batch")
        ledger.create_dataset("suite", "1", "regression", [batch.digest], key="vendor")
        self.vkey = ledger.log.vkey
        self.bundles = [root / "ck.tar.zst", root / "env.tar.zst", root / "suite.tar.zst"]
        for ref, out in zip((self.checkpoint, "custom@1", "suite@1"), self.bundles, strict=True):
            r = run(vendor, "export", ref, "--out", out)
            assert r.exit_code == 0, r.output
        self.vendor = vendor


@pytest.fixture(scope="module")
def world(quickstart_template: testkit.Template[str],
          tmp_path_factory: pytest.TempPathFactory) -> World:
    root = tmp_path_factory.mktemp("env-module")
    return testkit.as_own_user(root, lambda r: World(r, quickstart_template))


@pytest.fixture
def mark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module ``fix10_mark_env`` on sys.path that writes ``mark`` when imported."""
    mods, path = tmp_path / "mods", tmp_path / "mark"
    mods.mkdir()
    (mods / f"{MODULE}.py").write_text(f"from pathlib import Path\nPath({str(path)!r})"
                                       ".write_text('imported')\n")
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return path


def build_buyer(home: Path, world: World) -> None:
    """The buyer's ledger at ``home``: keys b1, b2, ev (and ev's X25519 key), prod; the
    vendor's keys trusted; the vendor's three bundles imported."""
    import shutil

    assert run(home, "init", "--origin", "buyer/log").exit_code == 0
    for k in ("b1", "b2", "ev", "prod"):
        assert run(home, "key", "new", k, "--no-encrypt").exit_code == 0
    assert run(home, "key", "new", "ev", "--alg", "x25519", "--no-encrypt").exit_code == 0
    trust = home / "trust"
    trust.mkdir()
    for p in [*(world.vendor / "keys").glob("*.pub"), *(home / "keys").glob("*.pub")]:
        shutil.copy(p, trust / p.name)
    shutil.copy(home / "keys" / "x25519" / "ev.pub", trust / "ev-x25519.pub")
    vkeys = f'"{world.vkey}", "{Ledger.open(home).log.vkey}"'
    # The buyer's own ev evaluates (a format-2 policy's evaluator role), prod records.
    policy = "format = 2\n" + testkit.BUYER_POLICY.format(vkeys=vkeys).replace(
        '"trust/vendor.pub"]', '"trust/vendor.pub", "trust/prod.pub"]')
    (home / "policy.toml").write_text(policy + '[roles.evaluator]\nkeys = ["trust/ev.pub"]\n'
                                      'encryption_keys = ["trust/ev-x25519.pub"]\n')
    for bundle in world.bundles:
        r = run(home, "import", bundle, "--policy", home / "policy.toml", "--key", "b1",
                "--key", "b2")
        assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def buyer_template(world: World, tmp_path_factory: pytest.TempPathFactory
                   ) -> testkit.Template[None]:
    """`build_buyer`, once per module (ci54: each test built it, 0.9 to 2 s of set-up under
    load)."""
    return testkit.build_template(tmp_path_factory.mktemp("env-module-buyer"),
                                  lambda home: build_buyer(home, world))


@pytest.fixture
def buyer(buyer_template: testkit.Template[None], tmp_path: Path) -> Path:
    """A copy of `buyer_template` for one test, known to its user (`testkit.copy_template`)."""
    return testkit.copy_template(buyer_template, tmp_path / "buyer")


def refusal(world: World) -> str:
    """What ``rollout`` and ``eval`` say of the vendor's environment ``custom@1``."""
    return (f"FAIL: environment custom@1 (imported from {origin_name(world.vkey)}): its "
            f"Gymnasium id '{GYM_ID}' would import the Python module '{MODULE}'; refused, "
            "nothing was run: a record from another origin does not choose code to run here. "
            f"If you trust that module, pass --allow-env-module {MODULE}\n")


def test_an_imported_environment_cannot_choose_a_module_to_import(
    world: World, buyer: Path, mark: Path
) -> None:
    size = Ledger.open(buyer).log.size
    for allowed in ((), ("--allow-env-module", "fix10_mark"),
                    ("--allow-env-module", "os")):  # naming another module is no blanket switch
        r = run(buyer, "rollout", "--checkpoint", world.checkpoint, "--env", "custom@1",
                "--episodes", "1", "--key", "b1", "--policy", buyer / "policy.toml", *allowed)
        assert r.exit_code == 1, r.output
        assert r.stderr == refusal(world)
    # Asked for by its Gymnasium id: the same record, the same refusal.
    r = run(buyer, "rollout", "--checkpoint", world.checkpoint, "--env", GYM_ID, "--episodes",
            "1", "--key", "b1", "--policy", buyer / "policy.toml")
    assert r.exit_code == 1 and "--allow-env-module fix10_mark_env" in r.stderr, r.output
    assert not mark.exists() and MODULE not in sys.modules
    assert Ledger.open(buyer).log.size == size
    r = run(buyer, "rollout", "--checkpoint", world.checkpoint, "--env", "custom@1",
            "--episodes", "1", "--key", "b1", "--policy", buyer / "policy.toml",
            "--allow-env-module", MODULE)
    assert r.exit_code == 0, r.output
    assert mark.read_text() == "imported"


def test_an_environment_of_this_ledger_may_name_a_module(
    world: World, buyer: Path, mark: Path
) -> None:
    """The buyer's own record of the same id: its own choice, as before fix10 (registered by
    its producer key: rollout plays only in an environment that verifies, rev23)."""
    Ledger.open(buyer).register_environment("mine", "1", key="prod", gym_id=GYM_ID)
    r = run(buyer, "rollout", "--checkpoint", world.checkpoint, "--env", "mine@1",
            "--episodes", "1", "--key", "prod", "--policy", buyer / "policy.toml")
    assert r.exit_code == 0, r.output
    assert mark.read_text() == "imported"


def test_eval_of_a_suite_in_an_imported_environment_cannot_import_its_module(
    world: World, buyer: Path, mark: Path
) -> None:
    """The vendor's regression suite names custom@1: the built-in evaluator would make it."""
    policy = buyer / "policy.toml"
    size = Ledger.open(buyer).log.size
    r = run(buyer, "eval", world.checkpoint, "--suite", "suite@1", "--key", "ev", "--policy",
            policy, "--pass-return", "10")
    assert r.exit_code == 1, r.output
    assert r.stderr == refusal(world)
    assert not mark.exists() and MODULE not in sys.modules
    assert Ledger.open(buyer).log.size == size
    r = run(buyer, "eval", world.checkpoint, "--suite", "suite@1", "--key", "ev", "--policy",
            policy, "--pass-return", "10", "--allow-env-module", MODULE)
    assert r.exit_code == 0, r.output
    assert mark.read_text() == "imported"


def test_a_sealed_suite_in_an_imported_environment_is_refused_before_it_is_unsealed(
    buyer: Path, world: World, mark: Path
) -> None:
    """The buyer's own sealed holdout, played in the vendor's custom@1: refused from the
    records alone, before an unsealing is logged or a byte decrypted."""
    from trajledger.runner.rollouts import run_policy

    ledger, policy = Ledger.open(buyer), buyer / "policy.toml"
    played = run_policy(None, "CartPole-v1", 2, 900, policy_version="random")
    batch = ledger.record_batch(played.steps, episodes=played.episodes, env="custom@1",
                                policy="random", key="prod", name="sealed-batch",
                                seal_to=ledger.seal_recipients(policy))
    ledger.create_dataset("held", "1", "holdout", [batch.digest], key="prod")
    size = Ledger.open(buyer).log.size
    r = run(buyer, "eval", world.checkpoint, "--suite", "held@1", "--key", "ev", "--policy",
            policy, "--pass-return", "10")
    assert r.exit_code == 1, r.output
    assert r.stderr.startswith(f"FAIL: environment custom@1 (imported from "
                               f"{origin_name(world.vkey)}): its Gymnasium id '{GYM_ID}'")
    assert Ledger.open(buyer).log.size == size  # no unsealing record
    assert not mark.exists() and MODULE not in sys.modules
    r = run(buyer, "eval", world.checkpoint, "--suite", "held@1", "--key", "ev", "--policy",
            policy, "--pass-return", "10", "--allow-env-module", MODULE)
    assert r.exit_code == 0, r.output
    assert "unsealing logged at" in r.stderr and mark.read_text() == "imported"
