"""What out48's outsiders found (the three kinds of user, each on a clean ledger: a team
signing its own datasets, an auditor, two vendors exchanging bundles); docs/SECURITY.md,
"Review of 2026-12-07, thirty-fourth round (out48)".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
import testkit
from click.testing import CliRunner
from test_runner_cli import expect, run
from testkit import Party, built_once

from trajledger.runner.cli import main

ROOT = Path(__file__).parents[2]


def test_key_list_does_not_call_a_public_half_alone_a_key_in_the_clear(
    runner: CliRunner, home: Path
) -> None:
    """The team's second machine holds only the public keys (``keys/*.pub``, as an auditor's
    copy of a ledger does; or a key whose ``.key`` was lost): ``key list`` marked each
    ``PLAIN``, the word it uses for a private key left unencrypted, and ``--json`` said
    ``"encrypted": false``, nothing else. Expected: it says the private half is not here
    (it verifies, it cannot sign), ``--json`` ``"private": false``; a key in the clear keeps
    ``PLAIN``."""
    expect(run(runner, home, "key", "new", "held", "--no-encrypt"), 0)
    expect(run(runner, home, "key", "new", "gone", "--no-encrypt"), 0)
    (home / "keys" / "gone.key").unlink()
    text = run(runner, home, "key", "list")
    expect(text, 0)
    lines = {line.split("\t")[0]: line.split("\t")[3] for line in text.stdout.splitlines()}
    assert lines["held"] == "PLAIN", lines
    assert "PLAIN" not in lines["gone"] and "cannot sign" in lines["gone"], lines
    listed = run(runner, home, "key", "list", "--json")
    expect(listed, 0)
    rows = {k["name"]: k for k in json.loads(listed.stdout)}
    assert rows["gone"]["private"] is False and rows["held"]["private"] is True, rows


def test_an_export_of_a_damaged_object_names_commands_that_exist(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """The auditor's lab flips one byte of a checkpoint's model file in the store, then
    exports the checkpoint: refused (exit 1) as it should be, but the line ended ``(run
    'trajledger log verify --deep')``, an option ``log verify`` does not have (exit 2).
    Expected: every command the refusal names runs (no usage error), and one names the
    damaged object."""
    home = testkit.copy_template(quickstart_template, tmp_path / "demo")
    shown = run(runner, home, "show", "cartpole-bc@2", "--json")
    expect(shown, 0)
    blob = json.loads(shown.stdout)["files"][0]["digest"].removeprefix("sha256:")
    path = home / "objects" / "sha256" / blob[:2] / blob[2:4] / blob
    path.chmod(0o600)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    r = run(runner, home, "export", "cartpole-bc@2", "--out", tmp_path / "ck.tar.zst")
    expect(r, 1)
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    named = [c.split()[1:] for c in re.findall(r"'(trajledger [^']+)'", line)]
    assert named, line
    codes = {}
    for command in named:
        if "BUNDLE|LEDGER" in command:
            continue  # a placeholder to fill in, not a command to run as written
        ran = run(runner, home, *command)
        codes[" ".join(command)] = ran.exit_code
        assert ran.exit_code != 2, (line, ran.output)
    assert any(blob in run(runner, home, *c.split()).stderr for c in codes), (line, codes)


def named_commands(text: str) -> list[tuple[int, str, list[str]]]:
    """Each ``trajledger GROUP SUB`` or ``trajledger COMMAND --option`` that ``text`` names
    (line, the command's path, the options after it), up to a quote, a backquote or ``--``."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(r"trajledger ([a-z][a-z-]*)((?: [^'`\"\n]*)?)", line):
            if m.group(1) not in main.commands:
                continue  # prose ("trajledger keeps ..."), not a command
            cmd: click.Command = main.commands[m.group(1)]
            path, words = [m.group(1)], m.group(2).split()
            while isinstance(cmd, click.Group) and words and re.fullmatch(r"[a-z][a-z-]*",
                                                                          words[0]):
                path.append(words[0])
                if words[0] not in cmd.commands:
                    break
                cmd = cmd.commands[words.pop(0)]
            opts = [w.split("=")[0].rstrip(",.;:)") for w in words[:words.index("--")
                                                                    if "--" in words else None]]
            out.append((n, " ".join(path), [o for o in opts if re.fullmatch(r"--[a-z][a-z0-9-]*",
                                                                              o)]))
    return out


def unknown(path: str, options: list[str]) -> list[str]:
    """What of ``trajledger PATH OPTIONS`` the command line does not have."""
    cmd: click.Command = main
    for word in path.split():
        if not isinstance(cmd, click.Group) or word not in cmd.commands:
            return [f"no command 'trajledger {path}'"]
        cmd = cmd.commands[word]
    if isinstance(cmd, click.Group):
        return []
    have = {o for p in [*cmd.params, *main.params] for o in [*p.opts, *p.secondary_opts]}
    return [f"'trajledger {path}' has no {o}" for o in options if o not in have | {"--help"}]


def test_every_command_the_docs_and_messages_name_exists() -> None:
    """An outsider runs what the refusals and the documents say to run, as written: the
    export refusal above named ``log verify --deep``; docs/SCALE.md names ``trajledger log
    witness`` for the witnesses' cosignatures (``log cosign`` and ``log add-cosignature``
    exist; ``log witness`` is ``No such command``). Expected: each ``trajledger GROUP SUB``
    and each ``--option`` after a command named in the package's messages, the README,
    keys/README.md and docs/ (but the dated reviews of SECURITY.md and PERFORMANCE.md, which
    quote what was) is one the command line has."""
    files = [*sorted((ROOT / "trajledger").rglob("*.py")), ROOT / "README.md",
             ROOT / "keys" / "README.md",
             *[p for p in sorted((ROOT / "docs").glob("*.md"))
               if p.name not in ("SECURITY.md", "PERFORMANCE.md")]]
    wrong = [f"{f.relative_to(ROOT)}:{n}: {problem}"
             for f in files for n, path, opts in named_commands(f.read_text())
             for problem in unknown(path, opts)]
    assert not wrong, "\n".join(wrong)


def test_a_filter_on_a_list_column_says_array_has(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """The auditor asks the audit index "which checkpoints used this dataset?" as SQL reads:
    ``kind = 'checkpoint' AND datasets LIKE '%…%'``. Refused (exit 2, right) with DataFusion's
    ``There isn't a common type to coerce List(Utf8) and Utf8 in LIKE expression``, naming
    neither the column nor what to write. Expected: the line names the list columns and
    ``array_has``, and the filter it shows, with the dataset's digest, answers."""
    home = testkit.copy_template(quickstart_template, tmp_path / "demo")
    shown = run(runner, home, "show", "cartpole-train@1", "--json")
    expect(shown, 0)
    dataset = json.loads(shown.stdout)["digest"]
    r = run(runner, home, "query", "artifacts", "--where",
            f"kind = 'checkpoint' AND datasets LIKE '%{dataset[7:19]}%'")
    expect(r, 2)
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("FAIL:")]
    assert "datasets" in line.split("LIKE expression")[-1] and "array_has(" in line, line
    told = re.search(r'"(array_has\(datasets, [^"]+)"', line)
    assert told, line
    asked = told.group(1).replace("sha256:…", dataset)
    ok = run(runner, home, "query", "artifacts", "--where", f"kind = 'checkpoint' AND {asked}",
             "--json")
    expect(ok, 0)
    assert [(a["name"], a["version"]) for a in json.loads(ok.stdout)] == [("cartpole-bc", "1")]


def test_a_successor_signed_by_too_few_says_which_keys_sign_and_that_one_is_lost(
    runner: CliRunner, home: Path
) -> None:
    """The team lost its only approver's private key: its line says to make a new key under
    another name "which a new policy names"; the team did (``key new approver2``, ``policy
    init`` naming it), and ``policy set FILE --key approver2`` said only ``signed by 0 of the
    current policy's approvers, want 1``: not which keys those are, nor that the one here
    cannot sign. Expected: the refusal names the approver key of the policy in force and says
    its private half is not here (restore it); with it back, the command the refusal names
    records the successor."""
    expect(run(runner, home, "key", "new", "vendor", "--no-encrypt"), 0)
    expect(run(runner, home, "key", "new", "approver", "--no-encrypt"), 0)
    expect(run(runner, home, "policy", "init", "--roles", "producer,approver", "--out",
               home / "policy.toml"), 0)
    expect(run(runner, home, "policy", "set", home / "policy.toml", "--key", "approver",
               "--yes"), 0)
    expect(run(runner, home, "key", "new", "approver2", "--no-encrypt"), 0)
    expect(run(runner, home, "policy", "init", "--roles", "producer,approver", "--approver",
               "approver2", "--out", home / "policy-2.toml"), 0)
    kept = (home / "keys" / "approver.key").read_bytes()
    (home / "keys" / "approver.key").unlink()
    lost = run(runner, home, "policy", "set", home / "policy-2.toml", "--key", "approver2",
               "--yes")
    expect(lost, 1)
    (line,) = [x for x in lost.stderr.splitlines() if x.startswith("FAIL:")]
    assert "approver: its private half is not here" in line and "backup" in line, line
    (home / "keys" / "approver.key").write_bytes(kept)
    (home / "keys" / "approver.key").chmod(0o600)
    again = run(runner, home, "policy", "set", home / "policy-2.toml", "--key", "approver2",
                "--yes")
    expect(again, 1)
    (line,) = [x for x in again.stderr.splitlines() if x.startswith("FAIL:")]
    told = re.search(r"'trajledger (policy set FILE [^']+)'", line)
    assert told, line
    args = [str(home / "policy-2.toml") if a == "FILE" else a for a in told.group(1).split()]
    expect(run(runner, home, *args, "--yes"), 0)


def steps(path: Path, episode: str) -> Path:
    path.write_text("".join(json.dumps({
        "episode_id": episode, "step": t, "obs": [0.01 * t, 0.02, 0.0, 0.0], "action": t % 2,
        "reward": 1.0, "terminated": t == 2, "truncated": False}) + "\n" for t in range(3)))
    return path


def vendor_only(vendor: Party, tmp_path: Path) -> None:
    """A vendor-only ledger (docs/third-party.md: a producer key, no approver) with
    environment ``cartpole@1``."""
    vendor.run("init", "--origin", "vendor.example/log")
    vendor.run("key", "new", "vendor", "--no-encrypt")
    vendor.run("policy", "init", "--roles", "producer", "--producer", "vendor", "--out",
               tmp_path / "vendor.toml")
    vendor.run("policy", "set", tmp_path / "vendor.toml", "--key", "vendor", "--yes")
    vendor.run("env", "register", "cartpole", "--version", "1", "--gym-id", "CartPole-v1",
               "--key", "vendor")


def clashing(tmp_path: Path) -> tuple[Party, Party, str, str, str]:
    """A vendor-only ledger's ``grid@1`` imported by a buyer, approved, then a ``grid@1`` of
    the buyer's own made: the two parties, the vendor's batch, its dataset and the buyer's
    ``dataset create`` result's stderr and digest. Built once per test process for each
    `vendor_only` (test_rev48_hostile_origin replaces it) and copied (`testkit.built_once`)."""
    return built_once(("clashing", vendor_only), tmp_path, _build_clashing)


def _build_clashing(tmp_path: Path) -> tuple[Party, Party, str, str, str]:
    """`clashing` built at ``tmp_path``."""
    vendor, buyer = Party(tmp_path, "vendor"), Party(tmp_path, "buyer")
    vendor_only(vendor, tmp_path)
    theirs_batch = vendor.last("record", steps(tmp_path / "v.jsonl", "v"), "--env", "cartpole@1",
                               "--policy", "random", "--key", "vendor")
    theirs = vendor.last("dataset", "create", "grid", "--version", "1", "--split", "train",
                         "--batch", theirs_batch, "--key", "vendor")
    vendor.run("export", "grid@1", "--out", tmp_path / "grid.tar.zst")
    buyer.run("init", "--origin", "buyer.example/log")
    for k in ("bprod", "approver"):
        buyer.run("key", "new", k, "--no-encrypt")
    pem = {"vendor": vendor.run("key", "export", "vendor").stdout.strip()}
    pem |= {k: buyer.run("key", "export", k).stdout.strip() for k in ("bprod", "approver")}
    (tmp_path / "buyer.toml").write_text(
        f'name = "buyer"\nserial = 1\n\n[roles.producer]\nkeys = ["""{pem["vendor"]}""", '
        f'"""{pem["bprod"]}"""]\n\n[roles.approver]\nkeys = ["""{pem["approver"]}"""]\n\n'
        f'[roles.log]\nvkeys = ["{vendor.vkey()}", "{buyer.vkey()}"]\n')
    buyer.run("policy", "set", tmp_path / "buyer.toml", "--key", "approver", "--yes")
    buyer.run("import", tmp_path / "grid.tar.zst", "--key", "approver")
    buyer.run("approve", "grid@1", "--key", "approver")
    buyer.run("env", "register", "gridworld", "--version", "1", "--key", "bprod")
    mine_batch = buyer.last("record", steps(tmp_path / "b.jsonl", "b"), "--env", "gridworld@1",
                            "--policy", "random", "--key", "bprod")
    made = buyer.run("dataset", "create", "grid", "--version", "1", "--split", "train",
                     "--batch", mine_batch, "--key", "bprod")
    return vendor, buyer, theirs_batch, theirs, made


def test_a_dataset_of_your_own_that_takes_an_imported_name_says_so(tmp_path: Path) -> None:
    """The buyer imports the vendor's ``grid@1``, approves it and trains on it; later it
    records a dataset of its own and names it ``grid`` version 1 too. An import says so of a
    clash (``name clash: … '{ref}' names yours``); ``dataset create`` said nothing, and from
    then on ``grid@1`` (in ``approve``, ``train --dataset``, ``verify`` and the buyer's
    scripts) named another dataset than the one approved and trained on. Expected: a
    ``WARNING: name clash`` naming both and the imported one's qualified name, which
    ``show`` resolves to the vendor's dataset."""
    _vendor, buyer, _batch, theirs, made = clashing(tmp_path)
    mine = made.stdout.strip().splitlines()[-1]
    (line,) = [x for x in made.stderr.splitlines() if x.startswith("WARNING: name clash")]
    assert mine[:19] in line and theirs[:19] in line, line
    told = re.search(r"refer to the imported one as '([^']+)'", line)
    assert told, line
    assert json.loads(buyer.run("show", told.group(1), "--json").stdout)["digest"] == theirs
    assert json.loads(buyer.run("show", "grid@1", "--json").stdout)["digest"] == mine
    # an environment of the buyer's own under the vendor's environment's name: the same
    env = buyer.run("env", "register", "cartpole", "--version", "1", "--key", "bprod")
    (line,) = [x for x in env.stderr.splitlines() if x.startswith("WARNING: name clash")]
    assert "your environment cartpole@1" in line and "+cartpole@1'" in line, line


def test_a_revocation_names_the_imported_dataset_it_affects_as_verify_finds_it(
    tmp_path: Path
) -> None:
    """After that clash, the vendor revokes its batch and the buyer imports the update:
    ``WARNING: affected here: dataset grid@1 (sha256:…) is built on`` the revoked batch. The
    buyer ran ``verify grid@1`` as the line reads: its own dataset, ``OK … checks passed``.
    Expected: the line names the vendor's dataset so that ``verify`` of that name fails."""
    vendor, buyer, batch, theirs, _made = clashing(tmp_path)
    size = vendor.size()
    vendor.run("revoke", batch, "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("export", "--updates-since", str(size), "--out", tmp_path / "updates.tar.zst")
    update = buyer.run("import", tmp_path / "updates.tar.zst", "--key", "approver")
    (line,) = [x for x in update.stderr.splitlines() if x.startswith("WARNING: affected here")]
    named = re.search(r"affected here: dataset (\S+) \(", line)
    assert named and theirs[:19] in line, line
    buyer.run("verify", named.group(1), code=1)


def minari_style(root: Path, metadata: dict[str, object]) -> Path:
    """A dataset laid out as Minari's HDF5 storage (``data/main_data.hdf5``, one group per
    episode), written by the team's own tooling: ``metadata`` as its ``metadata.json``."""
    h5py = pytest.importorskip("h5py")
    pytest.importorskip("minari")
    data = root / "data"
    data.mkdir(parents=True)
    with h5py.File(data / "main_data.hdf5", "w") as f:
        for ep in range(2):
            g = f.create_group(f"episode_{ep}")
            g.attrs["id"], g.attrs["total_steps"] = ep, 3
            g.create_dataset("observations", data=[[0.1 * t, 0.2] for t in range(4)])
            g.create_dataset("actions", data=[0, 1, 0])
            g.create_dataset("rewards", data=[1.0, 1.0, 1.0])
            g.create_dataset("terminations", data=[False, False, True])
            g.create_dataset("truncations", data=[False, False, False])
    (data / "metadata.json").write_text(json.dumps(metadata))
    return root


@pytest.mark.parametrize("spec", [
    None, '{"id": "NoSuchEnv-v0", "entry_point": "nowhere:Env"}', "{not json"],
    ids=["no-spaces", "spec-of-no-env", "space-not-json"])
def test_a_minari_style_dataset_without_its_spaces_is_refused_saying_so(
    runner: CliRunner, home: Path, tmp_path: Path, spec: str | None
) -> None:
    """The team's own tooling writes its rollouts in Minari's layout, with a
    ``metadata.json`` that holds no ``observation_space`` and ``action_space`` (only minari's
    ``DataCollector`` writes them), or an ``env_spec`` of an environment not installed here.
    ``env register --from-minari`` ended ``BUG: AssertionError:`` (``KeyError:
    'additional_wrappers'``), exit 4; ``record`` said ``Minari dataset cannot be read:
    AssertionError()``. Expected: exit 1 for both, naming ``metadata.json`` and what it lacks."""
    meta: dict[str, object] = {"dataset_id": "team/grid-v0", "total_episodes": 2,
                               "total_steps": 6, "data_format": "hdf5",
                               "minari_version": "0.5.4"}
    if spec == "{not json":  # spaces written by hand, not by minari's serialize_space
        meta |= {"observation_space": spec, "action_space": spec}
    elif spec is not None:
        meta["env_spec"] = spec
    data = minari_style(tmp_path / "grid", meta)
    expect(run(runner, home, "key", "new", "vendor", "--no-encrypt"), 0)
    expect(run(runner, home, "env", "register", "plain", "--version", "1", "--key", "vendor"), 0)
    for args in (("env", "register", "grid", "--version", "1", "--from-minari", data),
                 ("record", data, "--env", "plain@1", "--policy", "random")):
        r = run(runner, home, *args, "--key", "vendor")
        expect(r, 1)
        assert "metadata.json" in r.stderr and "action_space" in r.stderr, r.stderr
        assert "AssertionError()" not in r.stderr, r.stderr


def test_import_help_says_what_an_update_bundle_prints(runner: CliRunner, tmp_path: Path) -> None:
    """``import --help``: "Prints the verification report, then the imported artifact's digest
    as the last line". The vendor's update bundle (``export --updates-since``) holds no
    artifact: its last line on stdout is the report's (``    ✓ tree — 3 entries proven
    included``), which a script reading ``REF=$(trajledger import …)`` took for a reference.
    Expected: the help says what an update bundle prints."""
    vendor, buyer, batch, _theirs, _made = clashing(tmp_path)
    size = vendor.size()
    vendor.run("revoke", batch, "--reason", "consent withdrawn", "--key", "vendor")
    vendor.run("export", "--updates-since", str(size), "--out", tmp_path / "updates.tar.zst")
    update = buyer.run("import", tmp_path / "updates.tar.zst", "--key", "approver")
    assert not update.stdout.strip().splitlines()[-1].startswith("sha256:"), update.stdout
    shown = runner.invoke(main, ["import", "--help"])
    assert "update bundle" in " ".join(shown.stdout.split()), shown.stdout


def test_export_help_says_what_an_update_bundle_prints(runner: CliRunner, tmp_path: Path) -> None:
    """The vendor scripts its weekly update (README: each command that makes something prints
    its reference alone on stdout): ``export --updates-since 8 --out u.tar.zst`` printed
    ``9``, no reference, and ``export --help`` said nothing of what it prints. Expected: the
    help says it (the size of the log the bundle carries: the buyer's next
    ``--updates-since``)."""
    vendor = Party(tmp_path, "vendor")
    vendor_only(vendor, tmp_path)
    printed = vendor.last("export", "--updates-since", "1", "--out", tmp_path / "u.tar.zst")
    assert printed == str(vendor.size()), printed
    shown = " ".join(runner.invoke(main, ["export", "--help"]).stdout.split())
    assert "prints the size of the log it carries" in shown, shown


def lab_buyer(runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
              ) -> tuple[str, Party]:
    """A buyer (approvers ``b1``, ``b2``, trainer ``bt``) that imported and approved a
    quickstart lab's ``cartpole-train@1``; the lab's ``cartpole-bc@1`` exported to
    ``ck.tar.zst`` (not imported): its digest, and the buyer."""
    lab = testkit.copy_template(quickstart_template, tmp_path / "lab")
    expect(run(runner, lab, "export", "cartpole-bc@1", "--out", tmp_path / "ck.tar.zst"), 0)
    expect(run(runner, lab, "export", "cartpole-train@1", "--out", tmp_path / "data.tar.zst"), 0)
    theirs = json.loads(run(runner, lab, "show", "cartpole-bc@1", "--json").stdout)["digest"]
    vkey = json.loads(run(runner, lab, "log", "info", "--json").stdout)["vkey"]
    buyer = Party(tmp_path, "buyer")
    buyer.run("init", "--origin", "buyer.example/log")
    for k in ("b1", "b2", "bt"):
        buyer.run("key", "new", k, "--no-encrypt")
    pem = {k: run(runner, lab, "key", "export", k).stdout.strip()
           for k in ("vendor", "trainer", "approver-a", "approver-b")}
    pem |= {k: buyer.run("key", "export", k).stdout.strip() for k in ("b1", "b2", "bt")}
    keys = lambda *names: ", ".join(f'"""{pem[n]}"""' for n in names)  # noqa: E731
    (tmp_path / "buyer.toml").write_text(
        f'name = "buyer"\nserial = 1\n[roles.producer]\nkeys = [{keys("vendor")}]\n'
        f'[roles.approver]\nkeys = [{keys("approver-a", "approver-b", "b1", "b2")}]\n'
        f'threshold = 2\n'
        f'[roles.trainer]\nkeys = [{keys("trainer", "bt")}]\n'
        f'[roles.log]\nvkeys = ["{vkey}", "{buyer.vkey()}"]\n')
    buyer.run("policy", "set", tmp_path / "buyer.toml", "--key", "b1", "--key", "b2", "--yes")
    buyer.run("import", tmp_path / "data.tar.zst", "--key", "b1", "--key", "b2")
    for k in ("b1", "b2"):
        buyer.run("approve", "cartpole-train@1", "--key", k)
    return theirs, buyer


def test_impact_tells_apart_an_imported_checkpoint_and_yours_of_one_name(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """The auditor's "which checkpoints used this batch?" on a buyer that trained its own
    ``cartpole-bc@1`` on the lab's data, then imported the lab's ``cartpole-bc@1`` (the
    import names the clash):
    ``2 checkpoint(s) reached: cartpole-bc@1, cartpole-bc@1``, no digest, nothing to tell
    which is which (``verify cartpole-bc@1`` finds the buyer's). Expected: the imported one
    by its origin-qualified name, which ``show`` resolves to the lab's checkpoint."""
    theirs, buyer = lab_buyer(runner, quickstart_template, tmp_path)
    mine = buyer.last("train", "--dataset", "cartpole-train@1", "--key", "bt", "--name",
                      "cartpole-bc", "--version", "1", "--seed", "7")
    buyer.run("import", tmp_path / "ck.tar.zst", "--key", "b1", "--key", "b2")  # (a clash)
    r = buyer.run("impact", "cartpole-random")
    (line,) = [x for x in r.stderr.splitlines() if "checkpoint(s) reached" in x]
    names = line.split(": ", 1)[1].split(", ")
    assert len(names) == 2 and len(set(names)) == 2, line
    digests = {json.loads(buyer.run("show", n, "--json").stdout)["digest"] for n in names}
    assert digests == {theirs, mine}, (line, digests)


def test_the_approver_keys_here_that_cannot_sign_here_are_said_so(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """On the team's second machine (its ledger with only the public halves of the approver
    keys), ``admit`` of a dataset short of approvals ends ``approve it with 2 more approver
    keys (…; the policy's approver keys here: approver-a, approver-b …)``; following it,
    ``approve --key approver-a`` fails for the missing private half. Expected: a key whose
    private half is not here is named as such."""
    home = testkit.copy_template(quickstart_template, tmp_path / "demo")
    (home / "keys" / "approver-b.key").unlink()
    r = run(runner, home, "admit", "cartpole-unapproved@1")
    expect(r, 1)
    line = next(x for x in r.stderr.splitlines() if "approver keys here" in x)
    assert "approver-a;" not in line and "approver-a," in line, line
    assert "approver-b (its public half only" in line, line


@pytest.mark.parametrize("command", ["lineage", "impact", "show"])
def test_lineage_or_impact_of_a_bundle_says_where_its_answer_is(
    runner: CliRunner, quickstart_template: testkit.Template[str], tmp_path: Path,
    command: str,
) -> None:
    """The auditor holding a lab's bundle and nothing else asks the README's questions as
    written, ``trajledger lineage evidence.tar.zst`` ("what made this checkpoint?"),
    ``impact`` and ``show``: ``FAIL: .trajledger: no ledger here; run 'trajledger init' or
    pass --ledger DIR`` (exit 3), and in a ledger ``no artifact has this name``. Expected: a
    usage error naming where a bundle's answer is, whose ``trajledger verify`` command works
    as given."""
    lab = testkit.copy_template(quickstart_template, tmp_path / "lab")
    bundle = tmp_path / "evidence.tar.zst"
    expect(run(runner, lab, "export", "cartpole-bc@2", "--out", bundle), 0)
    for where in (tmp_path / "nowhere", lab):  # no ledger there; the lab's own
        r = runner.invoke(main, ["--ledger", str(where), command, str(bundle)])
        expect(r, 2)
        told = re.search(r"'trajledger (verify \S+ --policy POLICY)", r.stderr)
        assert told, r.stderr
    args = [str(lab / "policy.toml") if a == "POLICY" else a for a in told.group(1).split()]
    expect(runner.invoke(main, args), 0)
