"""Issue 9, item 10: every parser turns bad input into exit 1 or 3, never 4, in bounded time.

Through the command line (``record``, ``validate``, ``verify``, ``import``, ``policy set`` and
``policy check``, ``sign`` and ``verify --envelope``): Parquet truncated at several points and
random bytes; chat JSONL nested 100,000 deep in content, tool_calls and judge_scores; lone
surrogates (a ``\\ud800`` escape in JSON, raw invalid UTF-8, a file name that is not UTF-8);
Parquet shape metadata nested or huge; a policy TOML nested 100,000 deep; a gzip and a zstd
newline bomb (10 GB of newlines in about 10 MB, built in the test, read in a process of its own
under a timeout, forked from tests/preforked.py's preloaded server); bundles that are random,
truncated, whose tar members are larger than ``bundle.json`` lists, or whose declared total is
over the default cap. Each is refused with exit 1 or 3 and
``FAIL:`` lines naming the cause, no traceback and no ``BUG:``, and the ledger is unchanged.

Then, in process, a few hundred random and mutated inputs into each reader of a file or
document: nothing but `ProvenanceError` (or a report of problems) comes out.
(Attacks on the ledger's own files are in tests/e2e/test_attacks.py.)
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import json
import os
import random
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import preforked
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from click.testing import Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit import new_runner

from trajledger.ledger.config import LedgerConfig
from trajledger.ledger.keys import KeyStore
from trajledger.ledger.log.layout import parse_history, parse_tree_state
from trajledger.ledger.rollouts.schema import SHAPE_KEY
from trajledger.ledger.user_state import STATE_DIR_ENV
from trajledger.ledger.validate_files import validate_files
from trajledger.runner.cli import main
from trajledger.verify.bundle import BundleEvidence, BundleIndex, Limits
from trajledger.verify.checkpoint import Checkpoint
from trajledger.verify.consistency import parse_consistency_proof
from trajledger.verify.dsse import Envelope, pae
from trajledger.verify.errors import FormatError, ProvenanceError
from trajledger.verify.keys import PublicKey
from trajledger.verify.log_entry import LogEntry
from trajledger.verify.log_key import parse_handover
from trajledger.verify.note import Note
from trajledger.verify.policy import TrustPolicy
from trajledger.verify.sigstore_adapter import SigstoreBundle
from trajledger.verify.statement import Statement
from trajledger.verify.strict_json import load_object
from trajledger.verify.tiles import parse_entry_bundle, parse_tile
from trajledger.verify.tlog_proof import TlogProof

DEEP = 100_000
NEST = "[" * DEEP + "]" * DEEP
"""JSON nested 100,000 deep."""


class World:
    """A ledger with producer ``alice``, approvers a and b (2 of 2), an environment and the
    policy recorded; every input file lives in ``inputs``."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.inputs = root / "inputs"
        self.inputs.mkdir()
        for args in (("init", "--origin", "test/hostile"), *(
            ("key", "new", k, "--no-encrypt") for k in ("alice", "a", "b"))):
            self.ok(*args)
        vkey = json.loads(self.ok("log", "info", "--json"))["vkey"]
        self.policy = self.home / "policy.toml"
        self.policy.write_text(
            'name = "p"\n[roles.producer]\nkeys = ["keys/alice.pub"]\n[roles.approver]\n'
            f'keys = ["keys/a.pub", "keys/b.pub"]\nthreshold = 2\n[roles.log]\nvkeys = ["{vkey}"]\n'
        )
        self.ok("policy", "set", self.policy, "--key", "a", "--key", "b", "--yes")
        self.ok("env", "register", "cart", "--version", "1", "--gym-id", "CartPole-v1",
                "--key", "alice")
        self.good = self.parquet("good.parquet")

    def run(self, *args: str | Path) -> Result:
        return new_runner().invoke(main, ["--ledger", str(self.home), *map(str, args)])

    def ok(self, *args: str | Path) -> str:
        r = self.run(*args)
        assert r.exit_code == 0, r.output
        return r.stdout

    def size(self) -> int:
        return int(json.loads(self.ok("log", "info", "--json"))["size"])

    def parquet(self, name: str, field: pa.Field | None = None) -> Path:
        n = 20
        table = pa.table({
            "episode_id": ["e"] * n, "step": list(range(n)),
            "obs": pa.array([[0.0, float(i), 0.0, 1.0] for i in range(n)], pa.list_(pa.float32())),
            "action": [[0.0]] * n, "reward": [1.0] * n,
            "terminated": [False] * (n - 1) + [True], "truncated": [False] * n,
        })  # fmt: skip
        if field is not None:
            table = table.cast(pa.schema([field if f.name == field.name else f
                                          for f in table.schema]))
        path = self.inputs / name
        pq.write_table(table, path)
        return path

    def write(self, name: str, data: bytes | str) -> Path:
        path = self.inputs / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    old = os.environ.get(STATE_DIR_ENV)
    root = tmp_path_factory.mktemp("hostile")
    os.environ[STATE_DIR_ENV] = str(root / "state")
    try:
        return World(root)
    finally:
        if old is not None:
            os.environ[STATE_DIR_ENV] = old


def refused(world: World, *args: str | Path, code: int = 1, match: str = "") -> Result:
    """Run a command that must be refused: ``code``, FAIL lines (``match`` in them), no bug
    report or traceback, and nothing appended to the log."""
    size = world.size()
    r = world.run(*args)
    assert r.exit_code == code, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output and "BUG:" not in r.output, r.output
    lines = r.stderr.splitlines()
    assert lines and all(x.startswith(("FAIL:", "WARNING:")) for x in lines), r.stderr
    assert match in r.stderr, r.stderr
    assert world.size() == size
    return r


def record(path: Path) -> tuple[str, ...]:
    return ("record", str(path), "--env", "cart@1", "--policy", "p0", "--key", "alice")


# -- rollout inputs --------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [0, 4, 8, 1 / 3, 1 / 2, -9, -1])
def test_truncated_parquet(world: World, where: float) -> None:
    data = world.good.read_bytes()
    cut = int(len(data) * where) if isinstance(where, float) else where % len(data)
    path = world.write(f"cut-{cut}.parquet", data[:cut])
    message = "file is empty" if cut == 0 else "Parquet file cannot be read"
    for args in (record(path), ("validate", path)):
        refused(world, *args, match=message)


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_as_parquet(world: World, seed: int) -> None:
    rng = random.Random(seed)
    body = rng.randbytes(4000)
    for name, data, message in (
        ("random", body, "not valid UTF-8"),
        ("magic", b"PAR1" + body + b"PAR1", "Parquet file cannot be read"),
    ):
        path = world.write(f"{name}-{seed}.parquet", data)
        for args in (record(path), ("validate", path)):
            refused(world, *args, match=message)


def chat_line(**fields: str) -> str:
    """A chat JSONL line with raw JSON ``fields`` spliced in."""
    base = {"episode_id": '"e1"', "reward": "1",
            "messages": '[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]'}
    base.update(fields)
    return "{" + ",".join(f'"{k}":{v}' for k, v in base.items()) + "}\n"


@pytest.mark.parametrize(
    "line",
    [
        chat_line(messages=f'[{{"role":"user","content":{NEST}}}]'),
        chat_line(messages=f'[{{"role":"assistant","content":null,"tool_calls":{NEST}}}]'),
        chat_line(judge_scores='{"a":' * DEEP + "1" + "}" * DEEP),
    ],
    ids=["content", "tool_calls", "judge_scores"],
)
def test_chat_jsonl_nested_100k_deep(world: World, line: str) -> None:
    path = world.write("deep.jsonl", line)
    for args in (record(path), ("validate", path)):
        refused(world, *args, match="line 1: not accepted: JSON nested too deeply")


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (chat_line(messages='[{"role":"user","content":"a\\ud800b"}]'), "'a\\ud800b'"),
        (chat_line(episode_id='"e\\udfff"'), "'e\\udfff'"),
        (chat_line(judge_scores='{"\\ud800":1}'), "'\\ud800'"),
        (chat_line(messages='[{"role":"assistant","content":null,"tool_calls":'
                            '[{"id":"\\udc00","type":"function","function":{"name":"f",'
                            '"arguments":"{}"}}]}]'), "'\\udc00'"),
    ],
    ids=["content", "episode_id", "judge_scores key", "tool_calls"],
)
def test_lone_surrogates_in_chat_jsonl(world: World, line: str, shown: str) -> None:
    path = world.write("surrogate.jsonl", line)
    for args in (record(path), ("validate", path)):
        refused(world, *args, match=f"line 1: not valid Unicode: the string {shown} holds a "
                "lone surrogate")


def test_a_surrogate_pair_is_text(world: World) -> None:
    path = world.write("pair.jsonl", chat_line(
        messages='[{"role":"user","content":"\\ud83d\\ude00"},{"role":"assistant","content":"x"}]'))
    world.ok("validate", path)


def test_raw_invalid_utf8(world: World) -> None:
    path = world.write("raw.jsonl", chat_line(episode_id='"e\xff"').encode("latin-1"))
    for args in (record(path), ("validate", path)):
        refused(world, *args, match="line 1: not valid UTF-8")


def test_a_file_name_that_is_not_utf8(world: World) -> None:
    raw = os.fsencode(world.inputs) + b"/rollouts-\xff.parquet"
    with open(raw, "wb") as f:
        f.write(world.good.read_bytes())
    path = Path(os.fsdecode(raw))
    for args in (record(path), ("validate", path)):
        refused(world, *args, match="rollouts-\\xff.parquet: the file name is not valid UTF-8")


@pytest.mark.parametrize(
    "meta",
    [NEST, "[99999999999999999999, 99999999999999999999]", '["\\ud800"]', "\xff"],
    ids=["deep", "huge", "surrogate", "bytes"],
)
def test_parquet_shape_metadata(world: World, meta: str) -> None:
    """A tensor column's shape metadata is the input's: bad metadata is not a shape (the
    column then holds vectors of any length), never a crash."""
    field = pa.field("obs", pa.list_(pa.float32()), metadata={SHAPE_KEY: meta})
    path = world.parquet("shape.parquet", field)
    r = world.run("validate", path)
    assert r.exit_code in (0, 1) and "BUG:" not in r.output, r.output


# -- the newline bomb ------------------------------------------------------------------------------


def newline_bomb(path: Path, codec: str, total: int = 10 << 30) -> Path:
    """``total`` bytes of newlines after one good record: gzip members (or zstd frames) of
    1 MiB of newlines each, written back to back (a valid multi-member stream)."""
    chunk = b"\n" * (1 << 20)
    if codec == "gzip":
        head = gzip.compress(chat_line().encode(), mtime=0)
        member = gzip.compress(chunk, compresslevel=9, mtime=0)
    else:
        z = zstandard.ZstdCompressor(level=19)
        head, member = z.compress(chat_line().encode()), z.compress(chunk)
    with open(path, "wb") as f:
        f.write(head)
        for _ in range(total // len(chunk)):
            f.write(member)
    return path


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_newline_bomb_is_refused_in_bounded_time(world: World, codec: str) -> None:
    bomb = newline_bomb(world.inputs / f"bomb.jsonl.{codec[:2]}", codec)
    assert bomb.stat().st_size < 40 << 20  # about 10 MB (gzip) or less (zstd) for 10 GB
    env = {**os.environ, STATE_DIR_ENV: str(world.home.parent / "state")}
    size = world.size()
    for args in (record(bomb), ("validate", str(bomb))):
        # A hang must fail the test, not hold it: a process of its own under a timeout.
        p = preforked.Script("from trajledger.runner.cli import main; main()",
                             ["--ledger", str(world.home), *args], env=env)  # fmt: skip
        _, stderr = p.communicate(timeout=120)
        assert p.returncode == 1, stderr
        assert "bytes of blank lines, want at most 1,048,576 (MAX_BLANK_BYTES): refused as a " \
            "possible decompression bomb" in stderr
        assert "Traceback" not in stderr and "BUG:" not in stderr
    assert world.size() == size


@pytest.mark.parametrize("encoding", ["dictionary", "plain"])
def test_a_parquet_bomb_is_refused_before_it_is_decoded(world: World, encoding: str) -> None:
    """A valid step table whose ``info`` is one 100 MiB string in every one of its 20 rows
    (the first two, plainly encoded, so that the test writes no more), a few kilobytes of
    zstd: 2 GiB as pyarrow decodes it. Refused from its pages' headers, naming the column
    (``ledger.rollouts.parquet_read``)."""
    n, big = 20, pa.array(['"' + "a" * (100 << 20) + '"'])
    good = pq.read_table(world.good)
    if encoding == "plain":
        good, n = good.slice(18), 2
    info = (pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), big)
            if encoding == "dictionary" else pa.chunked_array([big] * n))
    path = world.inputs / f"bomb-{encoding}.parquet"
    pq.write_table(good.append_column("info", info), path, compression="zstd",
                   store_schema=False, use_dictionary=encoding == "dictionary")
    del big, info
    assert path.stat().st_size < 1 << 20
    for args in (record(path), ("validate", path)):
        r = refused(world, *args, match="column 'info': a page of 1 value(s) decompresses to "
                                        "104,857,")
        assert "bytes, so one is over 67,108,864 (MAX_VALUE_BYTES): refused as a possible " \
            "decompression bomb" in r.stderr


@pytest.mark.parametrize("stream", [False, True], ids=["file", "stream"])
def test_a_compressed_arrow_ipc_bomb_is_refused_before_it_is_decompressed(
    world: World, stream: bool
) -> None:
    """A valid step table of two rows whose ``info`` is a 150 MiB string each, written as
    Arrow IPC with zstd: a few kilobytes that pyarrow decompresses whole before anything can
    be judged (``ledger.rollouts.ipc_read``)."""
    good = pq.read_table(world.good).slice(18)
    info = pa.chunked_array([pa.array(['"' + "a" * (150 << 20) + '"'])] * 2)
    table = good.append_column("info", info).combine_chunks()
    path = world.inputs / f"bomb-{'stream' if stream else 'file'}.arrow"
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    new = pa.ipc.new_stream if stream else pa.ipc.new_file
    with new(path, table.schema, options=options) as w:
        w.write_table(table)
    del info, table
    assert path.stat().st_size < 1 << 20
    for args in (record(path), ("validate", path)):
        refused(world, *args, match="Arrow IPC file: a record batch of ")
    assert "decompression bomb; write it uncompressed or in smaller batches" in refused(
        world, "validate", path).stderr


def test_a_signed_batch_holding_a_parquet_bomb_is_refused_by_the_gate(world: World) -> None:
    """A producer (a vendor, say, whose bundle was imported) signs a batch whose steps.parquet
    is a bomb, which ``record`` would have refused: ``dataset create`` warns, ``admit``
    refuses it as unreadable, in a few hundred megabytes, not gigabytes."""
    from trajledger import Ledger
    from trajledger.ledger.record import record_files
    from trajledger.verify import predicates

    good = world.ok(*record(world.good), "--name", "gate-good").split()[-1]
    shown = json.loads(world.ok("show", good, "--json"))
    with Ledger.open(world.home) as ledger:
        files = {f["path"]: ledger.store.path_of(f["digest"]) for f in shown["files"]}
        steps = pq.read_table(files["steps.parquet"])
        info = pa.DictionaryArray.from_arrays(pa.array([0] * steps.num_rows, pa.int32()),
                                              pa.array(['"' + "a" * (100 << 20) + '"']))
        bomb = world.inputs / "gate-bomb.parquet"
        pq.write_table(steps.append_column("info", info), bomb, compression="zstd",
                       store_schema=False)
        del info
        predicate = {k: v for k, v in shown["predicate"].items()
                     if k not in ("manifest", "features")}
        record_files(ledger, {"steps.parquet": bomb, "episodes.parquet": files["episodes.parquet"]},
                     KeyStore(world.home / "keys").signer("alice"), predicates.ROLLOUT_BATCH,
                     predicate, name="gate-bomb")
    created = world.run("dataset", "create", "gate-bomb-ds", "--version", "1", "--batch",
                        "gate-bomb", "--split", "train", "--key", "alice")
    assert created.exit_code == 0, created.output
    assert "its steps.parquet cannot be read (column 'info': a page of 1 value(s)" in created.stderr
    for k in ("a", "b"):
        world.ok("approve", "gate-bomb-ds@1", "--purpose", "train", "--key", k)
    r = refused(world, "admit", "gate-bomb-ds@1",
                match="> rollout-batch gate-bomb (sha256:")
    assert "schema: not readable Parquet: column 'info': a page of 1 value(s) decompresses to " \
        "104,857," in r.stderr and "refused as a possible decompression bomb" in r.stderr


# -- policies --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [("a = " + NEST + "\n", "array.toml"), ("a = " + "{b = " * DEEP + "1" + "}" * DEEP + "\n",
                                            "table.toml"),
     (json.dumps({"roles": {}})[:-1] + ', "x": ' + NEST + "}", "nested.json"),
     ('{"name": "\\ud800", "serial": 2}', "surrogate.json")],
    ids=["toml-array", "toml-inline-table", "json", "json-surrogate"],
)
def test_hostile_policies(world: World, text: str, name: str) -> None:
    path = world.write(name, text)
    message = "nested too deeply" if "surrogate" not in name else "lone surrogate"
    refused(world, "policy", "check", path, match=message)
    refused(world, "policy", "set", path, "--key", "a", "--key", "b", code=2,  # usage (left36)
            match=message)


def test_a_ledger_toml_nested_100k_deep(world: World, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    from trajledger.verify.__main__ import main as verify_main

    home = tmp_path / "copy"
    (home / "log").mkdir(parents=True)
    (home / "ledger.toml").write_text("[ledger]\nx = " + NEST + "\n")
    r = new_runner().invoke(main, ["--ledger", str(home), "log", "info"])
    assert r.exit_code == 3, r.output
    assert "ledger.toml: not valid TOML: nested too deeply" in r.stderr
    (home / "ledger.toml").write_text("ledger = 1\n")
    code = verify_main([str(home), "--policy", str(world.policy)])
    assert code in (1, 3) and "BUG" not in capsys.readouterr().err


# -- envelopes -------------------------------------------------------------------------------------


def test_hostile_envelopes(world: World) -> None:
    files = world.inputs / "signed"
    files.mkdir(exist_ok=True)
    (files / "a.txt").write_text("a")
    good = world.inputs / "good.dsse.json"
    world.ok("sign", files, "--key", "alice", "--out", good)
    pub = world.home / "keys" / "alice.pub"
    alice = KeyStore(world.home / "keys").signer("alice")
    statement = base64.b64decode(json.loads(good.read_text())["payload"])

    def signed(payload: bytes) -> bytes:
        sig = alice.sign(pae("application/vnd.in-toto+json", payload))
        return json.dumps({"payloadType": "application/vnd.in-toto+json",
                           "payload": base64.b64encode(payload).decode(),
                           "signatures": [{"keyid": alice.keyid,
                                           "sig": base64.b64encode(sig).decode()}]}).encode()

    cases = [
        (random.Random(1).randbytes(3000), "not valid UTF-8"),
        (good.read_bytes()[: len(good.read_bytes()) // 2], "malformed JSON"),
        (b'{"a":' + NEST.encode() + b"}", "nested too deeply"),
        (b'{"payloadType":"\\ud800","payload":"e30=","signatures":[]}', "lone surrogate"),
        (signed(statement[:-1] + b',"x":' + NEST.encode() + b"}"), "statement: nested too deeply"),
        (signed(random.Random(2).randbytes(500)), "statement"),
        # Signed, so the signature holds, but no Unicode text: refused, never shown or stored.
        (signed(statement[:-1] + b',"x":"\\ud800"}'), "statement: the string '\\ud800' holds a "
                                                        "lone surrogate"),
    ]
    for n, (data, message) in enumerate(cases):
        path = world.write(f"hostile-{n}.dsse.json", data)
        refused(world, "verify", files, "--envelope", path, "--pubkey", pub, match=message)
    refused(world, "sign", world.write("deep-name", ""), "--key", "alice", "--out",
            world.inputs / "x.json", "--name", "a\udc80", match="lone surrogate")


# -- bundles ---------------------------------------------------------------------------------------


def tar_of(members: list[tuple[str, bytes, int | None]]) -> bytes:
    """A pax tar; a member's header may declare a size other than its data's."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, size in members:
            info = tarfile.TarInfo(name)
            info.size = len(data) if size is None else size
            tar.addfile(info, io.BytesIO(data.ljust(info.size, b"\0")))
    return buf.getvalue()


def index_of(listed: list[tuple[str, bytes, int]]) -> bytes:
    members = [{"name": n, "sha256": hashlib.sha256(d).hexdigest(), "size": s}
               for n, d, s in sorted(listed)]
    return json.dumps({
        "created": "2025-01-01T00:00:00Z", "erased": [], "format": 2, "members": members,
        "omitted": [], "origin": "test/hostile", "subject": "sha256:" + "a" * 64, "terms": [],
        "vkey": "test/hostile+00000000+AAAA",
    }, separators=(",", ":"), sort_keys=True).encode()  # fmt: skip


OBJECT = b"x" * 100
OBJECT_NAME = "objects/sha256/" + hashlib.sha256(OBJECT).hexdigest()


def bundles() -> dict[str, tuple[bytes, str]]:
    """Hostile bundles and the message each is refused with."""
    z = zstandard.ZstdCompressor()
    listed = index_of([(OBJECT_NAME, OBJECT, len(OBJECT))])
    larger = z.compress(tar_of([("bundle.json", listed, None), (OBJECT_NAME, OBJECT, 10 << 20)]))
    return {
        "random": (random.Random(3).randbytes(5000), "not zstd-compressed"),
        "random-tar": (z.compress(random.Random(4).randbytes(5000)), "tar header 0"),
        "truncated": (larger[:100], "bundle truncated.tar.zst"),
        "member-larger-than-listed": (larger, f"member {OBJECT_NAME}: 10485760 bytes, "
                                              "bundle.json says 100"),
        "over-the-default-cap": (
            z.compress(tar_of([("bundle.json", index_of([(OBJECT_NAME, OBJECT, 65 << 30)]),
                                None)])),
            "bundle.json declares 69793218560 bytes of members, limit 68719476736"),
        "deep-index": (z.compress(tar_of([("bundle.json", b'{"a":' + NEST.encode() + b"}",
                                           None)])), "nested too deeply"),
    }


@pytest.mark.parametrize("name", list(bundles()))
def test_hostile_bundles(world: World, name: str) -> None:
    data, message = bundles()[name]
    path = world.write(f"{name}.tar.zst", data)
    refused(world, "verify", path, "--policy", world.policy, match=message)
    refused(world, "import", path, "--policy", world.policy, "--key", "a", "--key", "b",
            match=message)


def test_a_bundle_writes_no_more_than_it_declares(world: World, tmp_path: Path) -> None:
    """The member larger than listed is refused before a byte of it is written, and the
    temporary directory is removed; a small cap refuses a bundle declaring more than it."""
    data, _ = bundles()["member-larger-than-listed"]
    path = world.write("larger.tar.zst", data)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(FormatError, match=r"10485760 bytes, bundle\.json says 100"):
        BundleEvidence.open(path, workdir=work)
    assert list(work.iterdir()) == []
    tar = tar_of([("bundle.json", index_of([(OBJECT_NAME, OBJECT, len(OBJECT))]), None),
                  (OBJECT_NAME, OBJECT, None)])
    small = world.write("small.tar.zst", zstandard.ZstdCompressor().compress(tar))
    with pytest.raises(FormatError, match=r"zstd frame declares \d+ bytes, more than the limit 99"):
        BundleEvidence.open(small, limits=Limits(total=99), workdir=work)
    # Without a declared frame size, the index's total is checked before any member is read.
    declared = tar_of([("bundle.json", index_of([(OBJECT_NAME, OBJECT, 1 << 20)]), None)])
    small.write_bytes(zstandard.ZstdCompressor(write_content_size=False).compress(declared))
    with pytest.raises(FormatError, match="declares 1048576 bytes of members, limit 65536"):
        BundleEvidence.open(small, limits=Limits(total=64 << 10), workdir=work)
    assert list(work.iterdir()) == []


# -- every reader, random bytes -------------------------------------------------------------------


READERS: dict[str, Callable[[bytes], Any]] = {
    "strict JSON": lambda b: load_object(b),
    "DSSE envelope": Envelope.from_bytes,
    "in-toto statement": Statement.from_bytes,
    "signed note": Note.from_bytes,
    "checkpoint": Checkpoint.from_text,
    "key handover": parse_handover,
    "log entry": LogEntry.from_bytes,
    "tlog-proof": TlogProof.from_bytes,
    "hash tile": lambda b: parse_tile(b, 2),
    "entry bundle": parse_entry_bundle,
    "bundle.json": BundleIndex.from_bytes,
    "consistency proof": lambda b: parse_consistency_proof(b, "proof"),
    "policy TOML": lambda b: TrustPolicy.from_toml(b, None),
    "policy JSON": lambda b: TrustPolicy.from_json(load_object(b)),
    "public key PEM": PublicKey.from_pem,
    "sigstore bundle": SigstoreBundle.from_bytes,
    "treeState": parse_tree_state,
    "history": parse_history,
    "ledger.toml": lambda b: LedgerConfig.from_toml(b, Path("ledger.toml")),
}
SEEDS = [
    b'{"a":1}', b'{"a":"\\ud800"}', b'{"\\udc00":[1,2]}', b"[" * 2000 + b"]" * 2000,
    b'{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}',
    b"o\n1\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n\xe2\x80\x94 o AAAAAAAA\n",
    b'name = "p"\nserial = 1\n[roles.producer]\nkeys = []\n', b"a = " + b"[" * 2000,
    b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", b'{"size":1,"root":"AA=="}',
    b"\x00\x05hello\x00\x00", b"[ledger]\nformat = 1\norigin = \"o\"\n",
]


def mutated(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """Random bytes, or a seed with bytes replaced, inserted or cut."""

    @st.composite
    def mutate(draw: st.DrawFn) -> bytes:
        data = bytearray(draw(st.sampled_from(seeds)))
        for _ in range(draw(st.integers(1, 6))):
            i = draw(st.integers(0, len(data)))
            op = draw(st.sampled_from(["set", "insert", "cut"]))
            if op == "set" and i < len(data):
                data[i] = draw(st.integers(0, 255))
            elif op == "insert":
                data[i:i] = draw(st.binary(max_size=8))
            else:
                del data[i : i + draw(st.integers(0, 8))]
        return bytes(data)

    return st.one_of(st.binary(max_size=600), mutate())


@pytest.fixture(scope="module")
def hostile_documents() -> list[bytes]:
    """300 inputs drawn from ``mutated(SEEDS)`` (derandomized: the same ones on every run),
    drawn once for all the readers of `READERS`: hypothesis spends about ten times longer
    drawing an input than a reader spends reading it, and each reader used to draw its own 300
    from the same strategy and seed."""
    drawn: list[bytes] = []

    @settings(max_examples=300, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=mutated(SEEDS))
    def draw(data: bytes) -> None:
        drawn.append(data)

    draw()
    return drawn


@pytest.mark.parametrize("name", list(READERS))
def test_every_reader_raises_only_provenance_errors(
    name: str, hostile_documents: list[bytes]
) -> None:
    read = READERS[name]
    assert len(hostile_documents) == 300
    for data in hostile_documents:
        try:
            with contextlib.suppress(ProvenanceError):
                read(data)
        except Exception as e:
            raise AssertionError(f"{name}: {type(e).__name__} on {data!r}") from e


def test_the_rollout_readers_raise_nothing(world: World, tmp_path: Path) -> None:
    """Rollout files (Parquet and JSONL, the bytes read as either): problems are a report, and
    nothing is raised."""
    table = pq.read_table(world.good)
    arrow = tmp_path / "good.arrow"
    with pa.ipc.new_file(arrow, table.schema) as writer:
        writer.write_table(table)
    seeds = [world.good.read_bytes(), arrow.read_bytes(), chat_line().encode() * 2,
             chat_line(judge_scores='{"a":[1,{"b":"\\ud800"}]}').encode()]
    paths = [tmp_path / "input.parquet", tmp_path / "input.jsonl"]

    @settings(max_examples=150, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=mutated(seeds))
    def check(data: bytes) -> None:
        for path in paths:
            path.write_bytes(data)
            validate_files([path])

    check()
