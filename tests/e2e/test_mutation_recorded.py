"""The outside check by mutation, extended (review redo20): what rev17's harness
(tests/e2e/test_mutation_props.py) did not mutate: batches recorded from trainers' outputs
(TRL's completions table, verl's rollout dump), a dataset recorded with its producer's card, and
an evaluation record (docs/SECURITY.md, "tenth round (redo20)").

What is mutated. In a copy of the quickstart ledger, made once per module: the batches recorded
from a TRL completions Parquet file and a verl JSON-lines dump (each its envelope, its manifest
and every file the manifest lists), the dataset of both recorded with ``--card`` (its envelope,
its manifest, its card), and an evaluation of the final checkpoint on it (its envelope, its
manifest, its episode results): each stored object's bytes, with `test_mutation_props.mutate`'s
operations, in place in the store, as an insider with write access to the ledger does.

The readers, each where it applies: ``verify REF --json`` (data re-hashed), ``export REF
--format parquet`` (a batch's data, each blob checked as read), ``card DS --format hf`` (the
dataset's lineage verified, its card read), ``export REF --format sigstore`` (the envelope,
after the lineage is verified as ``verify`` does: finding 1); ``stats CK`` and ``release CK``
do not judge (derived figures, not a verdict) and are left out.

The properties, for every case (as the rev17 harness's): (1) exit 0-3, no traceback, no ``BUG:``;
(2) a stored object is bound to its digest (a manifest, a blob) or to its log entry (an
envelope): what verifies (exit 0) must give the genuine output, and be a mutation of an object
`HARMLESS` names (a derived cache, checked where it is read); any other case is refused by
every reader; (3) the
reader leaves the ledger as it found it. Cases are drawn by hypothesis, derandomized:
`CASES` per target in the suite, times ``TRAJLEDGER_MUTATIONS``.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import tamperkit as tk
import testkit
from hypothesis import given
from hypothesis import strategies as st
from test_cards_cli import CARD
from test_mutation_props import Party, cases, cli, judged, mutate, verified

CASES = 30
"""Cases per target in the suite (`TRAJLEDGER_MUTATIONS` multiplies them)."""

@dataclass
class Recorded:
    """The genuine ledgers (`Party`, by target), the refs of what was recorded, and each
    target's stored objects (relative paths under the ledger) with the genuine output of
    each reader."""

    parties: dict[str, Party]
    refs: dict[str, str]
    objects: dict[str, dict[str, str]]
    genuine: dict[tuple[str, str], Any]
    root: Path


def _objects(party: Party, ref: str) -> tuple[str, dict[str, str]]:
    """The digest of ``ref`` and its stored objects: ``{part: path under the ledger}`` (its
    envelope, its manifest, each file it lists, and any other stored blob its predicate names,
    such as a card)."""
    r = party.run("show", ref, "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    store = party.home / "objects" / "sha256"

    def path(digest: str) -> str | None:
        hexd = digest.removeprefix("sha256:")
        p = store / hexd[:2] / hexd[2:4] / hexd
        return str(p.relative_to(party.home)) if p.is_file() else None

    out = {"envelope": path(shown["envelope"]), "manifest": path(shown["digest"])}
    out |= {f"file {f['path']}": path(f["digest"]) for f in shown.get("files", [])}

    def named(obj: Any, where: str) -> None:
        if isinstance(obj, dict):
            for k, v in obj.items():
                named(v, f"{where}.{k}")
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                named(v, f"{where}[{i}]")
        elif (isinstance(obj, str) and obj.startswith("sha256:")
              and (p := path(obj)) is not None and p not in out.values()):
            out[where] = p

    named(shown.get("predicate", {}), "predicate")
    return shown["digest"], {k: v for k, v in out.items() if v is not None}


HARMLESS: dict[str, str] = {
    "predicate.features.digest":
        "a batch's features file is derived from its steps.parquet (the episodes' "
        "fingerprints for the overlap checks), read only hashed against the digest its "
        "record signs, and on any problem computed again from the step file "
        "(ledger.batch_features, step 2); no reader here takes it, and verify does not "
        "judge a cache",
}
"""The stored objects whose mutation leaves every reader's answer as it was, and why."""


def _build(root: Path, template: testkit.Template[str]) -> Recorded:
    home, state = root / "home0", root / "state0"
    with testkit.user_state(state):
        testkit.copy_template(template, home)
        trl = root / "completions" / "completions_00003.parquet"
        trl.parent.mkdir()
        pd.DataFrame({"step": [3, 3], "prompt": ["2+2?", "3+3?"], "completion": ["4", "7"],
                      "accuracy_reward": [1.0, 0.0], "format_reward": [0.5, 0.5],
                      "advantage": [0.5, -0.5]}).to_parquet(trl)  # fmt: skip
        verl = root / "verl.jsonl"
        verl.write_text("".join(json.dumps(x) + "\n" for x in (
            {"input": "Solve 3*4.", "output": "12", "score": 1.0, "step": 7, "gts": "12"},
            {"input": "Solve 5-9.", "output": "4", "score": 0.0, "step": 7, "gts": "-4"})))
        card = root / "card.toml"
        card.write_text(CARD.format(title="chat rollouts"))
        refs = {}
        for args in (["env", "register", "llm", "--version", "1", "--key", "vendor"],
                     ["record", trl, "--env", "llm@1", "--policy", "grpo-3", "--key", "vendor",
                      "--name", "trl-batch"],
                     ["record", verl, "--env", "llm@1", "--policy", "verl-7", "--key", "vendor",
                      "--name", "verl-batch"],
                     ["dataset", "create", "chat", "--version", "1", "--split", "train",
                      "--batch", "trl-batch", "--batch", "verl-batch", "--card", card,
                      "--key", "vendor"]):
            r = cli(home, *args, state=state)
            assert r.exit_code == 0, r.output
            if args[0] == "record":
                refs[str(args[-1]).split("-")[0]] = r.stdout.strip().splitlines()[-1]
        party = Party.keep(home, state, root / "work")
    refs["dataset"] = "chat@1"
    parties = dict.fromkeys(refs, party)
    # An evaluation: the evaluation tests' ledger (tests/e2e/test_paths_agree.py, smaller),
    # bc@1 evaluated on regression@1, every episode passed.
    from test_evaluations import EVALUATE
    from test_paths_agree import build_evals

    home, state = root / "evals0", root / "evals-state0"
    with testkit.user_state(state):
        checkpoint = build_evals(home)
        script = root / "evaluate.py"
        script.write_text(EVALUATE)
        r = cli(home, "eval", checkpoint, "--suite", "regression@1", "--key", "evaluator",
                "--", sys.executable, script, "pass", state=state)
        assert r.exit_code == 0, r.output
        refs["evaluation"] = r.stdout.strip().splitlines()[-1]
        parties["evaluation"] = Party.keep(home, state, root / "evals-work")
    objects, genuine = {}, {}
    for target, ref in refs.items():
        refs[target], objects[target] = _objects(parties[target], ref)
        for reader, run in READERS[target].items():
            got = run(parties[target], refs[target], root / f"genuine-{reader}")
            assert not hasattr(got, "exit_code"), (target, reader, got.output)
            genuine[target, reader] = got
    for party in parties.values():
        party.reset()
    return Recorded(parties, refs, objects, genuine, root)


def _verify(party: Party, ref: str, _out: Path) -> Any:
    r = party.run("verify", ref, "--json")
    return r if judged(r, f"verify {ref}") else json.loads(r.stdout)


def _export(party: Party, ref: str, out: Path) -> Any:
    if out.exists():
        shutil.rmtree(out)
    r = party.run("export", ref, "--format", "parquet", "--out", out)
    if judged(r, f"export {ref}"):
        return r
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _sigstore(party: Party, ref: str, out: Path) -> Any:
    out.unlink(missing_ok=True)
    r = party.run("export", ref, "--format", "sigstore", "--out", out)
    return r if judged(r, f"export {ref} --format sigstore") else out.read_bytes()


def _card(party: Party, ref: str, _out: Path) -> Any:
    r = party.run("card", ref, "--format", "hf")
    return r if judged(r, f"card {ref}") else r.stdout


READERS: dict[str, dict[str, Callable[[Party, str, Path], Any]]] = {
    "trl": {"verify": _verify, "export parquet": _export, "export sigstore": _sigstore},
    "verl": {"verify": _verify, "export parquet": _export, "export sigstore": _sigstore},
    "dataset": {"verify": _verify, "card": _card, "export sigstore": _sigstore},
    "evaluation": {"verify": _verify, "export sigstore": _sigstore},
}


@pytest.fixture(scope="module")
def recorded(
    tmp_path_factory: pytest.TempPathFactory, quickstart_template: testkit.Template[str]
) -> Recorded:
    return _build(tmp_path_factory.mktemp("mutation-recorded"), quickstart_template)


@pytest.mark.parametrize("target", ["trl", "verl", "dataset", "evaluation"])
def test_recorded_objects(recorded: Recorded, target: str) -> None:
    """A stored object of a recorded TRL or verl batch, of a dataset with its card, or of an
    evaluation, mutated in place: every reader refuses it, and writes nothing."""
    party, ref = recorded.parties[target], recorded.refs[target]
    parts = sorted(recorded.objects[target])
    party.reset()
    pristine = tk.snapshot(party.home)  # each case's ledger, but for the object it mutates

    @cases(CASES)
    @given(part=st.sampled_from(parts), reader=st.sampled_from(sorted(READERS[target])),
           data=st.data())  # fmt: skip
    def check(part: str, reader: str, data: st.DataObject) -> None:
        party.reset()
        path = party.home / recorded.objects[target][part]
        op, bad = data.draw(mutate(path.read_bytes()))
        tk.overwrite(path, bad)
        before = tk.snapshot_changed(pristine, party.home, [recorded.objects[target][part]])
        what = f"{reader} of {target}: {part} {op} {bad[:200]!r}"
        got = READERS[target][reader](party, ref, recorded.root / f"mutated-{reader}")
        if not hasattr(got, "exit_code"):  # exit 0: it read the mutated object as genuine
            verified(f"{target}:{part}", op, what, got == recorded.genuine[target, reader],
                     HARMLESS.get(part))
        assert tk.snapshot(party.home) == before, f"{what}: the reader wrote the ledger"

    check()
