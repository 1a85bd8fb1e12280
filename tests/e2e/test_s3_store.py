"""A ledger whose blobs live on a real S3-compatible server (moto's server mode on 127.0.0.1,
started once for this module): ``trajledger init --store s3://...`` with the usual AWS
variables, record, verify, export a bundle to S3, import it from S3 into another ledger; every
blob read from S3 is checked against its digest, so an object changed in the bucket fails
verification; an unreachable bucket is refused at ``init`` with nothing created.

The server must start: if it cannot, the tests fail (they are not skipped).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import Result
from testkit import new_runner

from trajledger import Ledger
from trajledger.ledger.artifacts import create_dataset, register_environment
from trajledger.ledger.status import approve
from trajledger.runner.cli import main
from trajledger.runner.rollouts import run_policy
from trajledger.verify.errors import DigestMismatchError

BUCKET = "ledgers"


@dataclass(frozen=True)
class S3:
    endpoint: str
    client: object

    def keys(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(  # type: ignore[attr-defined]
            Bucket=BUCKET, Prefix=prefix
        )
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@pytest.fixture(scope="module")
def s3() -> Iterator[S3]:
    import boto3  # here, not at collection: boto3 and moto cost every xdist worker 0.4 s
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "test-access-key",
            "AWS_SECRET_ACCESS_KEY": "test-secret-key",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }.items():
            mp.setenv(name, value)
        mp.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        mp.delenv("AWS_PROFILE", raising=False)
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        try:
            yield S3(endpoint, client)
        finally:
            server.stop()


def run(home: Path, *args: str | Path) -> Result:
    runner = new_runner()
    return runner.invoke(main, ["--ledger", str(home), *map(str, args)])


def expect(result: Result, code: int) -> Result:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


POLICY = """name = "s3"
[roles.producer]
keys = ["{trust}/vendor.pub"]
[roles.approver]
keys = ["{trust}/a.pub", "{trust}/b.pub"]
threshold = 2
[roles.trainer]
keys = ["{trust}/vendor.pub"]
[roles.log]
vkeys = [{vkeys}]
"""


@pytest.fixture(scope="module")
def vendor(s3: S3, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger on s3://ledgers/vendor with one approved dataset, made through the CLI."""
    base = tmp_path_factory.mktemp("s3")
    home = base / "vendor"
    expect(run(home, "init", "--origin", "test/s3-vendor", "--store", f"s3://{BUCKET}/vendor"), 0)
    ledger = Ledger.open(home)
    keys = {n: ledger.keys.create(n, encrypt=False) for n in ("vendor", "a", "b")}
    register_environment(ledger, "cartpole", "1", keys["vendor"], gymnasium_id="CartPole-v1")
    played = run_policy(None, "CartPole-v1", 5, 0, policy_version="random")
    pq.write_table(played.steps, base / "steps.parquet")
    pq.write_table(played.episodes, base / "episodes.parquet")
    out = expect(
        run(
            home, "record", base / "steps.parquet", "--episodes", base / "episodes.parquet",
            "--env", "cartpole@1", "--policy", "random", "--key", "vendor", "--name", "random",
        ),
        0,
    )  # fmt: skip
    batch = out.stdout.strip().splitlines()[-1]
    create_dataset(ledger, "ds", "1", "train", [batch], keys["vendor"])
    for k in ("a", "b"):
        approve(ledger, "ds@1", keys[k])
    (home / "policy.toml").write_text(
        POLICY.format(trust=home / "keys", vkeys=f'"{ledger.log.vkey}"')
    )
    return home


def test_blobs_live_on_s3_and_the_log_stays_local(s3: S3, vendor: Path) -> None:
    keys = s3.keys("vendor/")
    objects = [k for k in keys if k.startswith("vendor/sha256/")]
    assert len(objects) >= 8  # env + batch + dataset + approvals: files, manifests, envelopes
    assert all(len(k.rsplit("/", 1)[1]) == 64 for k in objects)
    # Uploaded straight to their final keys: no temporary objects, no directory markers.
    assert len(objects) == len(keys) and not any(k.endswith("/") for k in keys)
    assert not (vendor / "objects").exists()
    assert (vendor / "log" / "checkpoint").is_file()
    ledger = Ledger.open(vendor)
    assert sorted(ledger.store.iter_digests()) == sorted("sha256:" + k[-64:] for k in objects)


def test_record_verify_export_import_through_s3(s3: S3, vendor: Path, tmp_path: Path) -> None:
    expect(run(vendor, "verify", "ds@1", "--policy", vendor / "policy.toml"), 0)
    uri = f"s3://{BUCKET}/bundles/ds.tar.zst"
    out = expect(run(vendor, "export", "ds@1", "--out", uri, "--policy", vendor / "policy.toml"), 0)
    assert f"bundle {uri} written" in out.stderr
    assert s3.keys("bundles/") == ["bundles/ds.tar.zst"]
    # The buyer keeps its blobs on the same server, under another prefix.
    buyer = tmp_path / "buyer"
    expect(run(buyer, "init", "--origin", "test/s3-buyer", "--store", f"s3://{BUCKET}/buyer"), 0)
    bl = Ledger.open(buyer)
    for k in ("b1", "b2"):
        bl.keys.create(k, encrypt=False)
    trust = tmp_path / "trust"
    trust.mkdir()
    for p in (vendor / "keys").glob("*.pub"):
        shutil.copy(p, trust / p.name)
    for k in ("b1", "b2"):
        shutil.copy(buyer / "keys" / f"{k}.pub", trust / f"{k}.pub")
    vkeys = f'"{Ledger.open(vendor).log.vkey}", "{bl.log.vkey}"'
    policy = POLICY.format(trust=trust, vkeys=vkeys).replace(
        f'keys = ["{trust}/a.pub", "{trust}/b.pub"]',
        f'keys = ["{trust}/a.pub", "{trust}/b.pub", "{trust}/b1.pub", "{trust}/b2.pub"]',
    )
    (buyer / "policy.toml").write_text(policy)
    done = expect(
        run(buyer, "import", uri, "--policy", buyer / "policy.toml", "--key", "b1", "--key", "b2"),
        0,
    )
    assert "imported" in done.stderr
    assert len(s3.keys("buyer/sha256/")) >= 6
    expect(run(buyer, "verify", "ds@1", "--policy", buyer / "policy.toml"), 0)
    missing = expect(
        run(
            buyer, "import", f"s3://{BUCKET}/bundles/none.tar.zst", "--policy",
            buyer / "policy.toml", "--key", "b1",
        ),
        3,
    )  # fmt: skip
    assert "no such object" in missing.stderr


def test_an_object_changed_on_s3_fails_every_read(s3: S3, vendor: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(vendor, copy)
    # The copy shares the vendor's objects: move them to a prefix of its own first.
    for key in s3.keys("vendor/"):
        s3.client.copy_object(  # type: ignore[attr-defined]
            Bucket=BUCKET, Key="copy/" + key[len("vendor/") :],
            CopySource={"Bucket": BUCKET, "Key": key},
        )  # fmt: skip
    toml = copy / "ledger.toml"
    toml.write_text(toml.read_text().replace(f"s3://{BUCKET}/vendor", f"s3://{BUCKET}/copy"))
    ledger = Ledger.open(copy)
    from trajledger.verify.log_entry import LogEntry

    entries = [LogEntry.from_bytes(ledger.log.entry(i)) for i in range(ledger.log.size)]
    envelope = next(e.envelope for e in entries if e.kind == "rollout-batch")
    key = f"copy/sha256/{envelope[7:9]}/{envelope[9:11]}/{envelope[7:]}"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=b"{}")  # type: ignore[attr-defined]
    with pytest.raises(DigestMismatchError, match=r"in ledgers/copy: content hashes to sha256:"):
        ledger.store.get(envelope)
    failed = expect(run(copy, "verify", "ds@1", "--policy", copy / "policy.toml"), 1)
    assert "FAIL" in failed.stderr


def test_init_refuses_a_bucket_that_does_not_exist(s3: S3, tmp_path: Path) -> None:
    home = tmp_path / "nobucket"
    result = expect(run(home, "init", "--store", "s3://no-such-bucket/x"), 3)
    assert result.stderr.startswith(
        "FAIL: store s3://no-such-bucket/x: bucket 'no-such-bucket' does not exist"
    ), result.stderr
    assert not (home / "ledger.toml").exists()


def test_a_bad_endpoint_is_refused_clearly(s3: S3, tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ENDPOINT_URL", "http://")
        result = expect(run(tmp_path / "x", "init", "--store", f"s3://{BUCKET}/x"), 3)
    assert "AWS_ENDPOINT_URL 'http://': not a URL" in result.stderr


def test_objects_written_by_pyarrow_are_plain_s3_objects(s3: S3, vendor: Path) -> None:
    """What other S3 tools see: each object's bytes hash to its key."""
    import hashlib

    for key in s3.keys("vendor/sha256/")[:5]:
        body = s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()  # type: ignore[attr-defined]
        assert hashlib.sha256(body).hexdigest() == key[-64:]
    assert os.environ["AWS_ENDPOINT_URL"] == s3.endpoint
    assert pa is not None


def test_keys_in_the_bucket_that_are_not_objects_are_not_read_as_objects(
    s3: S3, tmp_path: Path
) -> None:
    # Whoever can write the bucket (or another tool) can put any key under the prefix. A key
    # whose last part was 64 characters but not a digest made `fsck` and `gc` fail whole (exit
    # 1, 'object digest: ... is not of the form sha256:<64 lowercase hex>'); keys with `..` or
    # another directory are never read or deleted as objects.
    home = tmp_path / "stray"
    expect(run(home, "init", "--origin", "test/s3-stray", "--store", f"s3://{BUCKET}/stray"), 0)
    digest = Ledger.open(home).store.put_bytes(b"an orphan")
    hexd = digest[7:]
    strays = ["stray/sha256/zz/zz/" + "g" * 64, "stray/sha256/AB/CD/" + hexd.upper(),
              f"stray/sha256/../../elsewhere/{hexd}", f"stray/sha256/00/00/{hexd}"]
    for key in strays:
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=b"not it")  # type: ignore[attr-defined]
    r = expect(run(home, "fsck", "--json"), 0)
    assert json.loads(r.stdout)["orphans"] == {digest: 9}
    r = expect(run(home, "gc", "--min-age", "0", "--yes"), 0)
    assert "removed 1 orphan object(s) (9 bytes)" in r.stderr, r.stderr
    left = [k for k in s3.keys("stray/") if not k.endswith("/")]  # pyarrow leaves a marker
    assert sorted(left) == sorted(strays)  # only the orphan's own key went


SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        (f"s3://AKIAEXAMPLE:{SECRET}@{BUCKET}/x", "credentials in a location are refused"),
        (f"s3://AKIAEXAMPLE@{BUCKET}/x", "credentials in a location are refused"),
        (f"s3://{BUCKET}:9000/x", "want s3://BUCKET[/PREFIX]"),
        (f"s3://{BUCKET}/x?endpoint_override=http://evil.example", "want s3://BUCKET[/PREFIX]"),
    ],
    ids=["key-and-secret", "key", "port", "query"],
)
def test_a_location_with_credentials_or_settings_is_refused_without_echoing_them(
    s3: S3, vendor: Path, tmp_path: Path, location: str, problem: str
) -> None:
    # Before: credentials in an s3:// URI (or a port) ended in 'BUG: ArrowInvalid: ... got a
    # URI: 'AKIAEXAMPLE:<the secret>@ledgers'' (exit 4, the secret printed); a query was
    # silently ignored (the ledger kept it in ledger.toml, and the endpoint used was another).
    home = tmp_path / "creds"
    r = expect(run(home, "init", "--store", location), 3)
    assert problem in r.stderr and SECRET not in r.output, r.output
    assert not (home / "ledger.toml").exists()
    policy = vendor / "policy.toml"
    bundle = location.rsplit("/", 1)[0] + "/ds.tar.zst"
    for args in (("import", bundle, "--policy", policy, "--key", "a"),
                 ("export", "ds@1", "--out", bundle, "--policy", policy)):
        r = expect(run(vendor, *args), 3)
        assert problem in r.stderr and SECRET not in r.output, r.output
        assert r.stderr.count("\n") == 1, r.stderr


def _downloads(home: Path) -> list[Path]:
    return sorted(p for p in (home / "tmp").rglob("*") if p.is_file())


def test_a_bundle_uri_larger_than_a_bundle_may_be_is_refused_unread(
    s3: S3, vendor: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rev10: a bundle URI was downloaded whole, unbounded, into the system temp directory
    # before anything was read (a hostile bucket's huge object filled /tmp first).
    import trajledger.ledger.exchange as exchange

    monkeypatch.setattr(exchange, "max_bundle_file", lambda: 1000, raising=False)
    key = "probes/huge.tar.zst"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=b"\0" * 4096)  # type: ignore[attr-defined]
    r = expect(run(vendor, "import", f"s3://{BUCKET}/{key}", "--policy",
                   vendor / "policy.toml", "--key", "a"), 1)  # fmt: skip
    assert r.stderr.count("\n") == 1, r.stderr
    assert (f"s3://{BUCKET}/{key}: 4096 bytes, more than a bundle may hold (1000); nothing "
            "downloaded") in r.stderr, r.stderr
    assert _downloads(vendor) == []


def test_an_interrupted_bundle_download_is_in_the_ledgers_tmp_and_leaves_nothing(
    s3: S3, vendor: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trajledger.ledger.remote as remote

    key = "probes/interrupted.tar.zst"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=os.urandom(4096))  # type: ignore[attr-defined]
    seen: list[Path] = []
    real = remote.open_filesystem

    class Interrupting:
        def __init__(self, fs: object) -> None:
            self.fs = fs

        def __getattr__(self, name: str) -> object:
            return getattr(self.fs, name)

        def open_input_stream(self, path: str, **options: object) -> object:
            inner = self.fs.open_input_stream(path, **options)  # type: ignore[attr-defined]

            class Stream:
                def __enter__(self) -> Stream:
                    return self

                def __exit__(self, *exc: object) -> None:
                    inner.close()

                def read(self, n: int) -> bytes:
                    if seen:  # Ctrl-C on the second read, the first one written
                        raise KeyboardInterrupt
                    seen.extend(_downloads(vendor) or [Path("(none in LEDGER/tmp)")])
                    return bytes(inner.read(min(n, 1024)))

            return Stream()

    def interrupting(uri: str) -> tuple[object, str]:
        fs, path = real(uri)
        return Interrupting(fs), path

    monkeypatch.setattr(remote, "open_filesystem", interrupting)
    r = run(vendor, "import", f"s3://{BUCKET}/{key}", "--policy", vendor / "policy.toml",
            "--key", "a")  # fmt: skip
    assert r.exit_code == 130, r.output
    assert "Traceback" not in r.output
    assert len(seen) == 1 and seen[0].name == "interrupted.tar.zst", seen
    assert seen[0].parent.parent == vendor / "tmp", seen  # LEDGER/tmp/.tmp-<host>-<pid>-…d/
    assert _downloads(vendor) == []
    assert not any((vendor / "tmp").iterdir())
    # The download itself removes its partial file (not only the directory it is in).
    seen.clear()
    with pytest.raises(KeyboardInterrupt):
        remote.download(f"s3://{BUCKET}/{key}", tmp_path, limit=1 << 20)
    assert list(tmp_path.iterdir()) == []


def test_a_bundle_on_s3_is_the_bundle_file_byte_for_byte(
    s3: S3, vendor: Path, tmp_path: Path
) -> None:
    # Found by fix9: pyarrow compresses and decompresses by the name's extension, so a bundle
    # exported to s3://…/x.tar.zst was stored compressed a second time (another tool's copy of
    # the object was no bundle), and an import decompressed whatever the bucket held as it
    # downloaded (a small object could unpack to any size).
    import zstandard

    key = "probes/plain.tar.zst"
    expect(run(vendor, "export", "ds@1", "--out", f"s3://{BUCKET}/{key}", "--policy",
               vendor / "policy.toml"), 0)  # fmt: skip
    body = s3.client.get_object(Bucket=BUCKET, Key=key)["Body"].read()  # type: ignore[attr-defined]
    tar = zstandard.ZstdDecompressor().stream_reader(body).read(512)
    assert tar[257:262] == b"ustar", tar[:8]  # one decompression gives the tar
    local = tmp_path / "local.tar.zst"
    local.write_bytes(body)
    expect(run(vendor, "verify", local, "--policy", vendor / "policy.toml"), 0)


def test_a_bundle_compressed_twice_is_refused_saying_what_to_do(
    s3: S3, vendor: Path, tmp_path: Path
) -> None:
    """What 'export --out s3://...tar.zst' stored before fix9 (the bundle compressed a second
    time by pyarrow) is refused with the step that makes it importable, from S3 and on disk."""
    import zstandard

    local = tmp_path / "ds.tar.zst"
    expect(run(vendor, "export", "ds@1", "--out", local, "--policy", vendor / "policy.toml"), 0)
    twice = zstandard.ZstdCompressor().compress(local.read_bytes())
    s3.client.put_object(Bucket=BUCKET, Key="probes/twice.tar.zst", Body=twice)  # type: ignore[attr-defined]
    (tmp_path / "twice.tar.zst").write_bytes(twice)
    for where in (f"s3://{BUCKET}/probes/twice.tar.zst", tmp_path / "twice.tar.zst"):
        r = expect(run(vendor, "import", where, "--policy", vendor / "policy.toml", "--key", "a",
                       "--key", "b"), 1)
        assert r.stderr == (
            f"FAIL: {where}: a bundle compressed twice (as 'export --out s3://...' stored "
            "bundles before 2026-12-03): copy it down, run 'zstd -d' on it once, and import "
            "the file that gives; nothing imported\n"), r.stderr


def test_a_downloaded_bundles_refusal_names_the_object_not_a_temporary_file(
    s3: S3, vendor: Path
) -> None:
    # (it said 'FAIL: bundle download-w8vl0st9: ...': the download's temporary name)
    import zstandard

    key = "probes/not-a-bundle.tar.zst"
    body = zstandard.ZstdCompressor().compress(b"not a tar" * 100)
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=body)  # type: ignore[attr-defined]
    r = expect(run(vendor, "import", f"s3://{BUCKET}/{key}", "--policy", vendor / "policy.toml",
                   "--key", "a", "--key", "b"), 1)  # fmt: skip
    assert "bundle not-a-bundle.tar.zst" in r.stderr and "download-" not in r.stderr, r.stderr
    assert not any((vendor / "tmp").iterdir())


def test_a_bundle_uri_larger_than_the_free_space_is_refused_unread(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trajledger.ledger.remote as remote
    from trajledger.ledger.errors import StoreError

    key = "probes/roomy.tar.zst"
    s3.client.put_object(Bucket=BUCKET, Key=key, Body=b"\0" * 4096)  # type: ignore[attr-defined]
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(remote.shutil, "disk_usage", lambda _p: usage._replace(free=100))
    with pytest.raises(StoreError, match=r"4096 bytes, only 100 free in .*; nothing downloaded$"):
        remote.download(f"s3://{BUCKET}/{key}", tmp_path, limit=1 << 20)
    assert list(tmp_path.iterdir()) == []
