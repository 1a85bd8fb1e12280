"""The names and versions of new records (the outside check of 2026-12-04, eleventh round: rev22).

A new environment, evaluator, dataset or checkpoint is named and versioned by one grammar
(`trajledger.ledger.names`, schemas/SPEC.md "Names and versions"): off it is a usage error,
exit 2, one line saying the grammar, before the ledger is opened or anything is signed. A name
equal to a recorded one but for letter case is refused (exit 1). Records already in a log keep
the name they were signed with and still verify. docs/SECURITY.md, "Review of 2026-12-04,
eleventh round (rev22)".
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import testkit
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger import artifacts, clikit
from trajledger.runner.cli import main

GRAMMAR = "[A-Za-z0-9][A-Za-z0-9._-]{0,"

HOSTILE = [
    "cartpole\u2010train",  # U+2010 HYPHEN: looks like cartpole-train
    "c\u0430rtpole-train",  # a Cyrillic a
    "../x", "a/b", "/etc/x", "..", ".hidden", "_x", "x" * 5000,
    "a\u202eb", "a\nb", "a\x1bb", "", " a", "a b",
    "a+b", "ORIGIN+cartpole",  # '+' follows an origin
    "a@b",  # '@' ends a name
    "x" * 129,
]

COMMANDS = {
    "env": ["env", "register", "{name}", "--version", "{version}", "--gym-id", "CartPole-v1",
            "--key", "vendor"],
    "evaluator": ["evaluator", "register", "{name}", "--version", "{version}", "--kind",
                  "deterministic", "--key", "vendor"],
    "dataset": ["dataset", "create", "{name}", "--version", "{version}", "--split", "train",
                "--batch", "{batch}", "--key", "vendor"],
    "checkpoint": ["train", "--dataset", "cartpole-train@1", "--key", "trainer", "--name",
                   "{name}", "--version", "{version}", "--", "python", "-c", "pass"],
}


def run(home: Path, *args: str | Path) -> tuple[int, str]:
    r = new_runner().invoke(main, ["--ledger", str(home), *map(str, args)])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, r.output


def stdout(home: Path, *args: str) -> str:
    r = new_runner().invoke(main, ["--ledger", str(home), *args])
    assert r.exit_code == 0, r.output
    return r.stdout


def log_size(home: Path) -> int:
    return int(json.loads(stdout(home, "log", "info", "--json"))["size"])


@contextmanager
def off_the_grammar() -> Iterator[None]:
    """Record as a ledger from before the grammar did (or another vendor's software does)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(artifacts, "check_new", lambda *_a: None)
        m.setattr(clikit.RecordName, "convert", lambda _self, value, *_a: value)
        yield


@pytest.fixture(scope="module")
def home(quickstart_template: testkit.Template[str], tmp_path_factory: pytest.TempPathFactory
         ) -> Path:
    return testkit.copy_template(quickstart_template, tmp_path_factory.mktemp("names") / "q")


def argv(home: Path, kind: str, name: str, version: str) -> list[str]:
    shown = stdout(home, "log", "show", "--json").splitlines()
    batch = next(e["subject"] for e in map(json.loads, shown) if e["kind"] == "rollout-batch")
    return [a.format(name=name, version=version, batch=batch) if a.startswith("{") else a
            for a in COMMANDS[kind]]


def buyer_of(vendor: Path, buyer: Path) -> Path:
    """A buyer ledger (origin ``<its directory's name>/log``, approvers b1 and b2) whose
    ``policy.toml`` trusts ``vendor``'s keys and log (testkit.BUYER_POLICY)."""
    assert run(buyer, "init", "--origin", f"{buyer.name}/log")[0] == 0
    (buyer / "trust").mkdir()
    for k in ("b1", "b2"):
        assert run(buyer, "key", "new", k, "--no-encrypt")[0] == 0
    for p in [*(vendor / "keys").glob("*.pub"), *(buyer / "keys").glob("b*.pub")]:
        shutil.copy(p, buyer / "trust" / p.name)
    vkeys = f'"{Ledger.open(vendor).log.vkey}", "{Ledger.open(buyer).log.vkey}"'
    (buyer / "policy.toml").write_text(testkit.BUYER_POLICY.format(vkeys=vkeys))
    return buyer


@pytest.mark.parametrize("kind", sorted(COMMANDS))
@pytest.mark.parametrize("where", ["name", "version"])
def test_a_new_name_or_version_off_the_grammar_is_a_usage_error(
    home: Path, kind: str, where: str
) -> None:
    """Before, ``dataset create`` recorded ``cartpole‐train`` (U+2010, beside the quickstart's
    ``cartpole-train``), ``../x``, ``a/b`` and 5,000 ``x``s with exit 0, and refused a control
    character or an empty name only when it came to record it (exit 1)."""
    size = log_size(home)
    for value in HOSTILE:
        name, version = (value, "7") if where == "name" else (f"fresh-{kind}", value)
        code, out = run(home, *argv(home, kind, name, version))
        assert code == 2, (value, out)
        assert GRAMMAR in out and out.count("Error:") == 1, (value, out)
        if len(value) > 80:
            assert len(out) < 1000, out  # the value is cut, not printed whole
    assert log_size(home) == size


def test_the_longest_names_of_the_grammar_are_recorded(home: Path) -> None:
    """The grammar's edges: 128 characters of name, 64 of version, every character it has."""
    name = "A9._-" + "z" * 123
    code, out = run(home, *argv(home, "env", name, "1._-Z" + "0" * 59))
    assert code == 0, out
    code, out = run(home, "verify", f"{name}@1._-Z" + "0" * 59)
    assert code == 0, out


@pytest.mark.parametrize(("kind", "name", "version", "twin"), [
    ("dataset", "Cartpole-train", "9", "dataset cartpole-train"),
    ("env", "CARTPOLE", "1", "environment cartpole"),
    ("evaluator", "Cartpole", "5", "environment cartpole"),  # another kind: one name to people
    ("checkpoint", "CartPole-BC", "3", "checkpoint cartpole-bc"),
    ("env", "cartpole", "V1", None),  # no letter in '1': another version
])
def test_a_name_equal_to_a_recorded_one_but_for_case_is_refused(
    home: Path, kind: str, name: str, version: str, twin: str | None
) -> None:
    """``Cartpole-train`` beside ``cartpole-train``: a reviewer reads one for the other, and
    they are one file name on macOS's file system. Before, recorded (exit 0)."""
    size = log_size(home)
    code, out = run(home, *argv(home, kind, name, version))
    if twin is None:
        assert code == 0, out
        return
    assert code == 1, out
    assert f"{twin} is recorded" in out and "but for letter case" in out, out
    assert log_size(home) == size


def test_a_version_equal_to_a_recorded_one_but_for_case_is_refused(home: Path) -> None:
    code, out = run(home, *argv(home, "env", "shop", "v1"))
    assert code == 0, out
    code, out = run(home, *argv(home, "env", "shop", "V1"))
    assert code == 1 and "environment shop@v1 is recorded" in out, out


def test_an_older_record_named_off_the_grammar_still_verifies(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """A ledger from before the grammar (or another vendor's, imported) holds names it would
    now refuse: they are found, shown and verified as they were signed."""
    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    with off_the_grammar():
        for name in ("cartpole\u2010train", "a/b", "Cartpole"):
            code, out = run(home, *argv(home, "env", name, "1"))
            assert code == 0, out
    for name in ("cartpole\u2010train", "a/b", "Cartpole"):
        for args in (["verify", f"{name}@1"], ["show", f"{name}@1"],
                     ["lineage", f"{name}@1", "--format", "mermaid"]):
            code, out = run(home, *args)
            assert code == 0, (args, out)


def test_the_nastiest_name_a_log_can_carry_is_escaped_in_every_lineage_format(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """An older or imported record's name may hold what ends a mermaid label (``"]``, ``-->``),
    a dot string (``"``, a last ``\\``) or opens an HTML tag: a guard (sound on main too)."""
    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    name = 'e"]-->x<b>&#;\\'
    with off_the_grammar():
        assert run(home, *argv(home, "env", name, "1"))[0] == 0
    out = {f: stdout(home, "lineage", f"{name}@1", "--format", f)
           for f in ("mermaid", "dot", "html", "json")}
    assert 'e#quot;]--#gt;x#lt;b#gt;#38;#35;;\\@1' in out["mermaid"], out["mermaid"]
    assert not any('"]' in line.split('["', 1)[1].removesuffix('"]')
                   for line in out["mermaid"].splitlines() if '["' in line), out["mermaid"]
    assert 'label="environment\\ne\\"]-->x<b>&#;\\\\@1' in out["dot"], out["dot"]
    assert "x<b>" not in out["html"] and "e&quot;]--&gt;x&lt;b&gt;&amp;#;\\@1" in out["html"]
    assert json.loads(out["json"])["nodes"][1]["name"] == name


def test_a_buyer_is_warned_of_an_imported_name_off_the_grammar_or_a_twin_in_case(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """A vendor's software signs names this one refuses: ``cartpole‐train`` (U+2010) reads as
    the vendor's ``cartpole-train`` in every listing, and ``CARTPOLE`` as ``cartpole``. The
    buyer takes them in as signed (they verify), warned once each, the name escaped so the
    difference shows. Before, imported without a word (`record.lookalike` sees one script)."""
    vendor = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    with off_the_grammar():
        for name in ("cartpole\u2010train", "CARTPOLE"):
            assert run(vendor, *argv(vendor, "env", name, "1"))[0] == 0
    buyer = buyer_of(vendor, tmp_path / "buyer")
    warned = []
    for ref in ("cartpole@1", "cartpole\u2010train@1", "CARTPOLE@1"):
        bundle = tmp_path / f"{len(warned)}.tar.zst"
        assert run(vendor, "export", ref, "--out", bundle)[0] == 0
        code, out = run(buyer, "import", bundle, "--policy", buyer / "policy.toml",
                        "--key", "b1", "--key", "b2")
        assert code == 0, out
        warned.append([line for line in out.splitlines() if line.startswith("WARNING: imp")])
    assert warned[0] == [], warned
    assert len(warned[1]) == 1 and warned[1][0].startswith(
        "WARNING: imported environment 'cartpole\\u2010train'@'1' is off the grammar of this "
        "ledger's names ([A-Za-z0-9][A-Za-z0-9._-]{0,127}, a version {0,63}): it may pass for "
        "another name; refer to it by its digest sha256:"), warned
    assert len(warned[2]) == 1 and warned[2][0].startswith(
        "WARNING: imported environment 'CARTPOLE'@'1' differs from the recorded name "
        "'cartpole' only in letter case; refer to it by its digest sha256:"), warned
    for ref in ("cartpole\u2010train@1", "CARTPOLE@1"):
        code, out = run(buyer, "verify", ref, "--policy", buyer / "policy.toml")
        assert code == 0, out


KEY_OPTIONS = {"key", "keys", "key_name", "key_names", "cosign_key", "evaluator_key",
               "unseal_key"}
NOT_A_KEY_NAME = {(("export",), "key"): "a key name or a keyid (the signature to export)"}


def test_every_key_option_takes_a_key_name() -> None:
    """``--key ../vendor`` was refused only when the key was loaded, as an operational error
    (exit 3, after the ledger was opened); ``key new`` alone checked the name as a usage error.
    Every option naming a key of the ledger now has the key name's type (exit 2)."""
    import click

    def leaves(cmd: click.Command, path: tuple[str, ...] = ()) -> Iterator[
            tuple[tuple[str, ...], click.Command]]:
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from leaves(sub, (*path, name))
        else:
            yield path, cmd

    untyped = [(path, p.name) for path, cmd in leaves(main) for p in cmd.params
               if p.name in KEY_OPTIONS and (path, p.name) not in NOT_A_KEY_NAME
               and not isinstance(p.type, clikit.KeyName)]
    assert untyped == [], untyped
    assert len([1 for _, cmd in leaves(main) for p in cmd.params if p.name in KEY_OPTIONS]) > 20


def test_a_key_name_that_is_a_path_is_a_usage_error(home: Path) -> None:
    size = log_size(home)
    for args in (argv(home, "dataset", "d9", "1"), ["approve", "cartpole-train@1"],
                 ["attest", home / "policy.toml"], ["revoke", "cartpole@1", "--reason", "x"]):
        for key in ("../vendor", "a/b", ""):
            args = [a for a in args if a not in ("--key", "vendor")]
            code, out = run(home, *args, "--key", key)
            assert code == 2 and "use 1-64 letters, digits" in out, (args, out)
    code, out = run(home, "key", "export", "../keys/vendor")
    assert code == 2 and "use 1-64 letters, digits" in out, out
    assert log_size(home) == size


def test_a_default_checkpoint_name_off_the_grammar_is_refused_before_training(
    quickstart_template: testkit.Template[str], tmp_path: Path
) -> None:
    """``train`` with a plug-in names the checkpoint ``<dataset>-<trainer>`` by default: from
    an older ledger's dataset ``café`` that is ``café-bc``, off the grammar. It is refused after
    admission and before training, saying to give --name (not after training, at the record)."""
    home = testkit.copy_template(quickstart_template, tmp_path / "q")
    with off_the_grammar():
        code, out = run(home, *argv(home, "dataset", "caf\u00e9", "1"))
        assert code == 0, out
    for key in ("approver-a", "approver-b"):
        code, out = run(home, "approve", "caf\u00e9@1", "--key", key, "--purpose", "train")
        assert code == 0, out
    size = log_size(home)
    code, out = run(home, "train", "--dataset", "caf\u00e9@1", "--key", "trainer")
    assert code == 1, out
    assert "checkpoint name 'caf\\xe9-bc': use 1-128 ASCII" in out, out
    assert out.rstrip().endswith("; give --name and --version"), out
    assert log_size(home) == size
    code, out = run(home, "train", "--dataset", "caf\u00e9@1", "--key", "trainer",
                    "--name", "cafe-bc", "--seed", "7")
    assert code == 0, out


def test_a_key_named_as_another_but_for_case_or_punctuation_is_refused(home: Path) -> None:
    """``key new Vendor`` beside ``vendor`` (or ``approver_a`` beside ``approver-a``) was
    written: two keys that read as one, one file on macOS, one TRAJLEDGER_PASSPHRASE_VENDOR."""
    for name, twin in (("Vendor", "vendor"), ("approver_a", "approver-a"),
                       ("TRAINER", "trainer"), ("approver.B", "approver-b")):
        code, out = run(home, "key", "new", name, "--no-encrypt")
        assert code == 3 and f"key {name}: key {twin} is in " in out, out
        assert not (home / "keys" / f"{name}.pub").exists()
    code, out = run(home, "key", "new", "vendor2", "--no-encrypt")
    assert code == 0, out
    code, out = run(home, "key", "new", "Vendor2", "--no-encrypt", "--alg", "x25519")
    assert code == 0, out  # another folder: the evaluators' X25519 keys
    code, out = run(home, "key", "new", "VENDOR2", "--no-encrypt", "--alg", "x25519")
    assert code == 3 and "encryption key VENDOR2: key Vendor2 is in " in out, out


def test_a_policy_s_names_and_suites_reach_the_terminal_escaped(
    home: Path, tmp_path: Path
) -> None:
    """``policy check FILE`` is how a reviewer reads a proposed policy: its name and its
    release suites (``NAME@VERSION``) were printed as written, so an escape sequence cleared
    the screen or repainted the lines before it, and U+202E reordered the line, on the
    reviewer's terminal (click strips only colour codes, and only when not on a terminal)."""
    policy = (home / "policy.toml").read_text()
    trainer_pub = home / "keys" / "trainer.pub"
    policy = policy.replace('name = "quickstart"', 'name = "quick\\u001b[2Jstart"').replace(
        "serial = 1\n", "serial = 1\nformat = 2\n")
    policy += (f'\n[roles.evaluator]\nkeys = ["{trainer_pub}"]\nthreshold = 1\n\n'
               '[release]\napprovals = 1\n[[release.require]]\n'
               'suite = "hold\\u001b[2J\\u001b[1AFORGED\\u202eout@1"\nmin = 0.5\n')
    file = tmp_path / "proposed.toml"
    file.write_text(policy)
    r = new_runner().invoke(main, ["--ledger", str(home), "policy", "check", str(file)],
                            color=True)  # as on a terminal: nothing stripped
    assert r.exit_code == 0, r.output
    assert "\x1b" not in r.output and "\u202e" not in r.output, ascii(r.output)
    assert "policy quick\\u001b[2Jstart serial 1" in r.output, r.output
    assert "success_rate on hold\\u001b[2J\\u001b[1AFORGED\\u202eout@1 >= 0.5" in r.output


def test_a_new_log_origin_off_the_grammar_is_a_usage_error(tmp_path: Path) -> None:
    """A log's origin names it to people (``imported ... from ORIGIN+KEYHASH``): before,
    ``init --origin`` took ``vendor‐example/log`` (U+2010) and ``../../x``, and refused a
    control character only as the first checkpoint was signed (exit 1)."""
    for i, origin in enumerate(["vendor\u2010example/log", "../../x", "/log", "a\x1bb", "",
                                "a b", "a+b", "x" * 256]):
        code, out = run(tmp_path / f"l{i}", "init", "--origin", origin)
        assert code == 2 and "use 1-255 ASCII letters, digits, '.', '_', '-', '/' or ':'" in out, (
            origin, out)
        assert not (tmp_path / f"l{i}").exists()
    for i, origin in enumerate(["vendor.example/log", "lab.example/log:2026_v-1", "x" * 255]):
        code, out = run(tmp_path / f"ok{i}", "init", "--origin", origin)
        assert code == 0, out


def test_a_buyer_is_warned_of_a_vendor_log_origin_off_the_grammar(
    quickstart_template: testkit.Template[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log's origin names it to people (``imported ... from ORIGIN+KEYHASH``): a vendor whose
    log was made before the grammar, or by other software, may call it ``vendor‐example/log``
    (U+2010), which every listing shows as ``vendor-example/log``. The buyer takes the bundle
    in (the log is trusted by its key), warned once with the origin escaped. Before, without a
    word (rev22's "Left"); a vendor whose origin follows the grammar gets no warning."""
    from trajledger.ledger.home import LedgerHome

    real = LedgerHome.init  # (the quickstart names its log trajledger.quickstart/<hex>)
    monkeypatch.setattr(LedgerHome, "init", staticmethod(
        lambda d, origin: real(d, origin="vendor\u2010example/log")))
    odd = tmp_path / "odd"
    assert new_runner().invoke(main, ["quickstart", "--episodes", "10", str(odd)]).exit_code == 0
    monkeypatch.undo()
    plain = testkit.copy_template(quickstart_template, tmp_path / "plain")
    warned = []
    for vendor in (plain, odd):
        buyer = buyer_of(vendor, tmp_path / f"buyer-of-{vendor.name}")
        bundle = tmp_path / f"{vendor.name}.tar.zst"
        assert run(vendor, "export", "cartpole@1", "--out", bundle)[0] == 0
        code, out = run(buyer, "import", bundle, "--policy", buyer / "policy.toml", "--key",
                        "b1", "--key", "b2")
        assert code == 0, out
        warned.append([line for line in out.splitlines() if "origin" in line])
    key = Ledger.open(odd).log.vkey.split("+")[1]
    assert warned == [[], [
        "WARNING: the log's origin 'vendor\\u2010example/log' is off the grammar of log origins "
        "([A-Za-z0-9][A-Za-z0-9._/:-]{0,254}): it may pass for another log's; tell it by its "
        f"key hash {key}"]], warned


def test_policy_check_warns_of_a_release_suite_named_off_the_grammar(
    home: Path, tmp_path: Path
) -> None:
    """A release suite is named as its record was signed (the verifier core takes any
    ``NAME@VERSION``: it may be another vendor's), so a proposed policy may require
    ``regression‐suite@1`` (U+2010), which a reviewer reads as ``regression-suite@1``.
    ``policy check`` now warns once per such suite, escaped (rev22's "Left"); it warned of
    none before. A suite within the grammar gets no warning."""
    trainer_pub = home / "keys" / "trainer.pub"
    base = (home / "policy.toml").read_text().replace("serial = 1\n", "serial = 1\nformat = 2\n")
    warned = []
    for suite in ("regression-suite@1", "regression\u2010suite@1", "hold/out@1"):
        file = tmp_path / "proposed.toml"
        file.write_text(base + f'\n[roles.evaluator]\nkeys = ["{trainer_pub}"]\nthreshold = 1\n\n'
                        f'[release]\napprovals = 1\n[[release.require]]\nsuite = "{suite}"\n'
                        'min = 0.5\n')
        r = new_runner().invoke(main, ["--ledger", str(home), "policy", "check", str(file)])
        assert r.exit_code == 0, r.output
        warned.append([line for line in r.stderr.splitlines() if line.startswith("WARNING")])
    assert warned[0] == [], warned
    assert warned[1] == [
        "WARNING: [[release.require]] suite 'regression\\u2010suite@1': its name "
        "'regression\\u2010suite': use 1-128 ASCII letters, digits, '.', '_' or '-', starting "
        "with a letter or digit ([A-Za-z0-9][A-Za-z0-9._-]{0,127}); is it the suite you mean? "
        '(pin it with digest = "sha256:...")'], warned
    assert len(warned[2]) == 1 and "suite 'hold/out@1': its name 'hold/out'" in warned[2][0]
