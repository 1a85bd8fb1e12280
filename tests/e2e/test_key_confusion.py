"""A private key given where a public key goes, and the other way round (docs/SECURITY.md,
review rev25, finding 6): each is named for what it is, with what to do, not called corrupt."""

from __future__ import annotations

from pathlib import Path

from testkit import Party


def test_a_private_key_where_a_public_one_goes_is_named(tmp_path: Path) -> None:
    """A policy naming a private key file as a producer's key (the file next to the .pub, or
    its PEM pasted inline): before, "not a valid PEM public key (truncated, corrupt or not
    PEM)", and a user who believed it tried again with the same file, in a policy they share.
    Now the refusal says it is a private key, to give its public half and to replace it."""
    p = Party(tmp_path, "alice")
    p.run("init", "--origin", "x.example/log")
    p.run("key", "new", "alice", "--no-encrypt")
    key = p.home / "keys" / "alice.key"
    inline = '"""' + key.read_text() + '"""'
    for spec in ('"keys/alice.key"', inline):
        policy = p.home / "p.toml"
        policy.write_text(f'name = "p"\n[roles.producer]\nkeys = [{spec}]\nthreshold = 1\n')
        r = p.run("policy", "check", policy, code=1)
        assert r.stderr == (f"FAIL: policy {policy}: role producer: key 0: not a valid PEM "
                            "public key (a PRIVATE key: give its public half, and replace it: "
                            "whoever read it can sign)\n"), r.stderr


def test_a_public_key_where_the_private_one_goes_is_named(tmp_path: Path) -> None:
    """NAME.key holding the public key (a copy the wrong way round): before, "corrupt or
    truncated key file"; now it says what the file holds and what to put there (exit 3)."""
    p = Party(tmp_path, "alice")
    p.run("init", "--origin", "x.example/log")
    p.run("key", "new", "alice", "--no-encrypt")
    key = p.home / "keys" / "alice.key"
    key.write_bytes((p.home / "keys" / "alice.pub").read_bytes())  # its mode stays 0600
    r = p.run("env", "register", "grid", "--version", "1", "--source", "sim", "--key", "alice",
              code=3)
    assert r.stderr == (f"FAIL: key alice: cannot load {key}: it holds a public key, not the "
                        "private one: put the private key there\n"), r.stderr
