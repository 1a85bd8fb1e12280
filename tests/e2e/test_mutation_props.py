"""The outside check by mutation (rev17): genuine artifacts, their bytes mutated, each judged by
the reader a user runs on it (docs/SECURITY.md, "ninth round (rev17)").

What is mutated. Artifacts made by the commands themselves, once per module: an evidence bundle
(``export``) and each of its members (``bundle.json``, the checkpoint, ``entries/N``,
``proofs/N.tlog-proof``, ``policy/0.json``, objects), an update stream (``export
--updates-since``), a detached envelope and its public key (``sign``), a standalone tlog-proof
(``log proof``), the vendor's signed checkpoint note, and a quickstart ledger's files (its
checkpoint note, ``vkey``, last hash tile and entry bundle, the final checkpoint's envelope,
public keys, ``ledger.toml``), and a trust policy. The mutations (`mutate`): flip a bit,
insert bytes, delete or duplicate a span, truncate, swap two lines, upper-case a hex run,
respell base64 in the URL-safe alphabet or unpadded, a JSON key or TOML setting misspelt, and
for JSON: other white space or indentation, a ``\u0061`` escape, a number spelt ``1.0``, an
object's keys reversed, a key repeated (the structured ones drawn twice as often). A bundle's
members are also dropped, duplicated, swapped, moved, or edited with ``bundle.json`` made to
agree, as a tamperer would, and its tar or zstd bytes mutated; each part of a bundle and each
ledger file gets cases of its own.

The readers: ``trajledger verify BUNDLE`` and ``python -m trajledger.verify`` (also with
``--known-checkpoint``), ``trajledger import`` of the bundle into a fresh buyer and of the
update stream into a buyer holding the bundle, ``trajledger verify PATH --envelope E --pubkey
K``, ``verify_tlog_proof``, and ``verify REF``, ``log verify`` and ``show REF --json`` on the
mutated ledger.

The properties, for every case:

1. No traceback and no ``BUG:``: exit 0, 1, 2 or 3 (`judged`). Bombs built from the genuine
   bundle (`BOMBS`) are read by ``python -m trajledger.verify`` in a process of its own under
   a memory and CPU limit (`LIMITS`).
2. Malleability: a mutated input that verifies (exit 0) must report what the genuine one did
   (the JSON report: every digest, name, signer and check; for an import, the log entries,
   the stored objects and the signed import record), and a rule of `HARMLESS` must say why
   that mutation is harmless (`verified`); any other that verifies fails the test.
3. Nothing lost: a refused import leaves the buyer's ledger byte for byte and its user state
   row for row as they were (`Party.snapshot`); a reader leaves the mutated ledger as it was.

Cases are drawn by hypothesis, derandomized (the same ones on every run): 1,506 and seven
bombs, about 25 CPU-s. ``TRAJLEDGER_MUTATIONS=K`` multiplies every count by K, and
``TRAJLEDGER_MUTATIONS_LOG=FILE`` draws at random and lists what verified instead of failing
(a long run looking for more).
"""

from __future__ import annotations

import base64
import contextlib
import difflib
import gc
import hashlib
import io
import json
import os
import re
import resource
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tamperkit as tk
import testkit
import zstandard
from click.testing import Result
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from test_updates import Buyer, Vendor

from trajledger.runner.cli import main
from trajledger.verify.__main__ import main as verify_main
from trajledger.verify.errors import ProvenanceError
from trajledger.verify.note import verifier_from_vkey
from trajledger.verify.tlog_proof import TlogProof, verify_tlog_proof

SCALE = int(os.environ.get("TRAJLEDGER_MUTATIONS", "1"))
"""Multiplies every case count (1 in the suite)."""
DISCOVER = os.environ.get("TRAJLEDGER_MUTATIONS_LOG")
"""A file: a long run appends each mutated input that verified to it (JSON lines) instead of
failing on it, and draws at random (not derandomized)."""


def cases(n: int) -> settings:
    return settings(max_examples=n * SCALE, deadline=None, derandomize=not DISCOVER,
                    database=None, suppress_health_check=list(HealthCheck),
                    phases=[Phase.generate] if DISCOVER else list(Phase))  # fmt: skip


# -- the mutations ---------------------------------------------------------------------------


HEX_RUN = re.compile(rb"[0-9a-f]{8,}")
KEY = re.compile(rb'"([A-Za-z_]{2,})":|^([A-Za-z_]{2,}) *=', re.M)
B64_STD = re.compile(rb"[A-Za-z0-9+/]{16,}={0,2}")
JSON_OPS = ("json-space", "json-indent", "json-escape", "json-number", "json-key-order",
            "json-duplicate-key")  # fmt: skip
BYTE_OPS = ("flip", "insert", "delete", "duplicate", "truncate", "swap-lines", "hex-case",
            "base64-urlsafe")  # fmt: skip


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _dicts(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _dicts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _dicts(v)


def _numbers(obj: Any) -> int:
    if isinstance(obj, bool):
        return 0
    if isinstance(obj, int | float):
        return 1
    if isinstance(obj, dict):
        return sum(_numbers(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_numbers(v) for v in obj)
    return 0


@st.composite
def mutate(draw: st.DrawFn, data: bytes) -> tuple[str, bytes]:
    """One mutation of ``data``: ``(its name, the mutated bytes)``; the bytes differ from
    ``data`` (a mutation that would change nothing is drawn as a bit flip)."""
    doc = _json(data)
    # The structured ops (a key misspelt, JSON spelt otherwise) twice as often as the others.
    ops = BYTE_OPS + 2 * (("key-typo",) + (JSON_OPS if isinstance(doc, dict | list) else ()))
    op = draw(st.sampled_from(ops))
    out = _apply(draw, op, data, doc)
    if out == data:
        op, out = "flip", _apply(draw, "flip", data, doc)
    return op, out


def _apply(draw: st.DrawFn, op: str, data: bytes, doc: Any) -> bytes:
    n = len(data)
    pos = st.integers(0, max(n - 1, 0))
    if op == "flip" or n == 0:
        if n == 0:
            return b"\x00"
        i = draw(pos)
        return data[:i] + bytes([data[i] ^ (1 << draw(st.integers(0, 7)))]) + data[i + 1 :]
    if op == "insert":
        i = draw(st.integers(0, n))
        return data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]
    if op in ("delete", "duplicate"):
        i = draw(pos)
        j = draw(st.integers(i + 1, min(n, i + 64)))
        return data[:i] + data[j:] if op == "delete" else data[:j] + data[i:j] + data[j:]
    if op == "truncate":
        return data[: draw(pos)]
    if op == "swap-lines":
        lines = data.split(b"\n")
        if len(lines) < 2:
            return data
        i, j = draw(st.lists(st.integers(0, len(lines) - 1), min_size=2, max_size=2,
                             unique=True))  # fmt: skip
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if op == "key-typo":  # a JSON key or a TOML setting's name with a letter more or less
        keys = list(KEY.finditer(data))
        if not keys:
            return data
        m = draw(st.sampled_from(keys))
        g = 1 if m.group(1) else 2
        i = draw(st.integers(m.start(g), m.end(g) - 1))
        return data[:i] + (data[i : i + 1] * 2 if draw(st.booleans()) else b"") + data[i + 1 :]
    if op in ("hex-case", "base64-urlsafe"):
        runs = list((HEX_RUN if op == "hex-case" else B64_STD).finditer(data))
        if not runs:
            return data
        m = draw(st.sampled_from(runs))
        run = m.group()
        run = run.upper() if op == "hex-case" else run.replace(b"+", b"-").replace(b"/", b"_")
        if op == "base64-urlsafe" and draw(st.booleans()):
            run = run.rstrip(b"=")
        return data[: m.start()] + run + data[m.end() :]
    # JSON re-encodings: the same document, spelled otherwise.
    if op == "json-space":
        return json.dumps(doc, separators=(", ", ": ")).encode() + draw(
            st.sampled_from([b"", b"\n", b" \n\t"]))
    if op == "json-indent":
        return json.dumps(doc, indent=draw(st.sampled_from([1, 2, "\t"]))).encode()
    if op == "json-escape":  # one character of a string as a \\u escape
        spots = [m.start() for m in re.finditer(rb'"[^"\\]*[a-z]', data)]
        if not spots:
            return data
        i = draw(st.sampled_from(spots)) + 1
        while data[i : i + 1] not in b"abcdefghijklmnopqrstuvwxyz" or data[i : i + 1] == b"":
            i += 1
        return data[:i] + b"\\u%04x" % data[i] + data[i + 1 :]
    if op == "json-number":
        if not _numbers(doc):
            return data
        k = draw(st.integers(0, _numbers(doc) - 1))
        spelling = draw(st.sampled_from(["{}.0", "{}e0", "{}E+0", "{}.00"]))
        count = [0]

        def respell(obj: Any) -> Any:
            if isinstance(obj, dict):
                return {key: respell(v) for key, v in obj.items()}
            if isinstance(obj, list):
                return [respell(v) for v in obj]
            if isinstance(obj, int | float) and not isinstance(obj, bool):
                count[0] += 1
                if count[0] - 1 == k:
                    return _Raw(spelling.format(obj))
            return obj

        return _dumps_raw(respell(doc)).encode()
    if op == "json-key-order":
        targets = [d for d in _dicts(doc) if len(d) > 1]
        if not targets:
            return data
        t = draw(st.sampled_from(range(len(targets))))
        found = [0]

        def reorder(obj: Any) -> Any:
            if isinstance(obj, dict):
                items = [(key, reorder(v)) for key, v in obj.items()]
                if len(obj) > 1:
                    found[0] += 1
                    if found[0] - 1 == t:
                        items.reverse()
                return _Ordered(items)
            if isinstance(obj, list):
                return [reorder(v) for v in obj]
            return obj

        return _dumps_raw(reorder(doc)).encode()
    if op == "json-duplicate-key":
        targets = list(_dicts(doc))
        if not targets:
            return data
        t = draw(st.sampled_from(range(len(targets))))
        same = draw(st.sampled_from([True, True, True, False]))  # the same value, or another
        found = [0]

        def duplicate(obj: Any) -> Any:
            if isinstance(obj, dict):
                items = [(key, duplicate(v)) for key, v in obj.items()]
                found[0] += 1
                if found[0] - 1 == t and items:
                    key, v = items[0]
                    items.append((key, v if same else "other"))
                return _Ordered(items)
            if isinstance(obj, list):
                return [duplicate(v) for v in obj]
            return obj

        return _dumps_raw(duplicate(doc)).encode()
    raise AssertionError(op)


class _Raw(str):
    """A JSON number spelled as given."""


class _Ordered(list):  # type: ignore[type-arg]
    """An object's members in this order (keys may repeat)."""


def _dumps_raw(obj: Any) -> str:
    """Compact JSON, as trajledger writes it, but for `_Raw` spellings and `_Ordered` objects."""
    if isinstance(obj, _Raw):
        return str(obj)
    if isinstance(obj, _Ordered):
        return "{" + ",".join(json.dumps(k) + ":" + _dumps_raw(v) for k, v in obj) + "}"
    if isinstance(obj, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _dumps_raw(v) for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(_dumps_raw(v) for v in obj) + "]"
    return json.dumps(obj)


# -- judging ---------------------------------------------------------------------------------


def _b64(value: Any) -> bytes | None:
    """Standard or URL-safe base64, padded or not (as `verify.dsse.b64decode` takes it)."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4),
                                validate=True)
    except ValueError:
        return None


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys do not repeat (a repeated key is read one way here and maybe
    another by the reader judged: never harmless)."""
    if len({k for k, _ in pairs}) != len(pairs):
        raise ValueError("a key repeats")
    return dict(pairs)


def _same_envelope(genuine: bytes, mutated: bytes) -> bool:
    """The same DSSE envelope: payload type, payload and signatures (keyids, signature bytes)
    as decoded, whatever the JSON wrapper's spelling."""
    def signed(data: bytes) -> Any:
        doc = json.loads(data, object_pairs_hook=_unique)
        return (sorted(doc), doc.get("payloadType"), _b64(doc.get("payload")),
                [(s.get("keyid"), _b64(s.get("sig"))) for s in doc.get("signatures", [])])

    try:
        return bool(signed(genuine) == signed(mutated))
    except (ValueError, AttributeError, TypeError):
        return False


def _same_key(genuine: bytes, mutated: bytes) -> bool:
    """The same public key, whatever its PEM armour."""
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_public_key,
    )

    def raw(data: bytes) -> bytes:
        key = load_pem_public_key(data)
        return key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)

    try:
        return raw(genuine) == raw(mutated)
    except ValueError:
        return False


DEFAULTS = {"store": "objects", "keys": "plain", "group_writable": False}
"""What a setting of ``ledger.toml`` left out means (``keys`` not set: as in trajledger 0.1.0,
a plaintext key is refused only where a passphrase is set: as "plain")."""


def _same_settings(genuine: bytes, mutated: bytes) -> bool:
    """The same settings: comments, white space and order aside, a setting left out meaning its
    default; no setting or table that ``ledger.toml`` does not hold."""
    def settings(data: bytes) -> dict[str, Any] | None:
        doc = tomllib.loads(data.decode())
        section = doc.get("ledger")
        if set(doc) != {"ledger"} or not isinstance(section, dict) \
                or not set(section) <= {"format", "origin", *DEFAULTS}:  # fmt: skip
            return None
        return DEFAULTS | section

    try:
        return settings(genuine) == settings(mutated) is not None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False


def _members(content: list[tuple[str, bytes]] | bytes) -> list[tuple[str, bytes]] | None:
    """A bundle's members, sorted (None when the bytes are no zstd tar)."""
    if isinstance(content, list):
        return sorted(content)
    try:
        raw = zstandard.ZstdDecompressor().stream_reader(content).read()
        with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
            return sorted((i.name, tar.extractfile(i).read())  # type: ignore[union-attr]
                          for i in tar if i.isfile())  # fmt: skip
    except (zstandard.ZstdError, tarfile.TarError, OSError, EOFError):
        return None


def _bundle_harmless(genuine: list[tuple[str, bytes]], content: list[tuple[str, bytes]] | bytes,
                     *, reads_proofs: bool) -> str | None:  # fmt: skip
    """Why a mutated bundle that verified is the genuine one, or None."""
    members = _members(content)
    if members is None:
        return None
    if members == sorted(genuine):
        return "the same members: member order, tar headers and padding, zstd framing"
    was, now = dict(genuine), dict(members)
    if len(members) != len(genuine) or was.keys() != now.keys():
        return None
    changed = {n for n in was if was[n] != now[n]}
    try:
        index = ({k: v for k, v in json.loads(now["bundle.json"], object_pairs_hook=_unique)
                  .items() if k != "members"},
                 {k: v for k, v in json.loads(was["bundle.json"]).items() if k != "members"})
    except ValueError:
        return None
    if changed == {"bundle.json"} and {k for k in index[0].keys() | index[1].keys()
                                      if index[0].get(k) != index[1].get(k)} == {"created"}:
        return "bundle.json's creation time: not signed, and shown as unauthenticated"
    if not reads_proofs and all(n.startswith("proofs/") or n == "bundle.json" for n in changed) \
            and all(n in now for n in changed):  # fmt: skip
        return ("the inclusion proofs of a bundle of the whole tree: its verification rebuilds "
                "the root from the entries and reads none")
    return None


def _when(holds: bool, why: str) -> str | None:
    return why if holds else None


HARMLESS: dict[str, Callable[[bytes, bytes], str | None]] = {
    "envelope": lambda g, m: _when(_same_envelope(g, m), (
        "the same signed content: DSSE signs the payload type and payload (PAE), not the "
        "JSON wrapper's spelling; base64 is read in either alphabet")),
    "pubkey": lambda g, m: _when(_same_key(g, m), (
        "the same key: PEM armour (white space, text around the block) is not the key")),
    "ledger:log-key/log.pub": lambda g, m: _when(_same_key(g, m), "the same log key, PEM armour"),
    "ledger:log/vkey": lambda g, m: _when(g.strip() == m.strip(), "the same vkey, white space"),
    "ledger:ledger.toml": lambda g, m: _when(_same_settings(g, m), (
        "the same settings: comments, white space, order, a setting left out that means its "
        "default (store \"objects\", keys as \"plain\")")),
    "ledger:keys/vendor.pub": lambda g, m: (
        "keys/*.pub is read to sign, not to verify (the policy holds its keys inline): a "
        "replaced key is refused when it signs; log verify checks only that it holds a key"),
}
HARMLESS["ledger:keys/trainer.pub"] = HARMLESS["ledger:keys/vendor.pub"]
"""Per target: why a mutated input that verified (exit 0) is harmless, or None (then it fails
the test). Each is argued in docs/SECURITY.md ("ninth round (rev17)")."""


def judged(r: Result, what: str) -> int:
    """Property 1: the exit code, after checking it is 0-3 with no traceback and no BUG."""
    out = r.stdout + r.stderr
    assert r.exit_code in (0, 1, 2, 3), f"{what}: exit {r.exit_code}: {out[-2000:]}"
    assert r.exception is None or isinstance(r.exception, SystemExit), f"{what}: {r.exception!r}"
    assert "Traceback" not in out and "BUG:" not in out, f"{what}: {out[-2000:]}"
    return r.exit_code


def verified(target: str, op: str, what: str, same: bool, why: str | None) -> None:
    """Property 2, for a mutated input that verified (exit 0): it reports ``same`` as the
    genuine input, and ``why`` says why the mutation is harmless (`HARMLESS`)."""
    if DISCOVER:
        with open(DISCOVER, "a") as f:
            f.write(json.dumps({"target": target, "op": op, "same": same, "why": why,
                                "what": what}) + "\n")
        return
    assert same, f"{what}: verifies (exit 0) and reports otherwise than the genuine input"
    assert why, f"{what}: verifies (exit 0), and no reason says this mutation is harmless"


def harmless(target: str, genuine: bytes, mutated: bytes) -> str | None:
    rule = HARMLESS.get(target)
    return rule(genuine, mutated) if rule is not None else None


def _changed(was: Any, now: Any) -> str:
    """What changed in one file of a snapshot (the rows of a database, as SQL)."""
    if isinstance(was, str) and isinstance(now, str) and "\n" in was + now:
        lines = difflib.unified_diff(was.splitlines(), now.splitlines(), lineterm="", n=0)
        return "\n".join(list(lines)[2:12])
    return f"{was} -> {now}"


def _differs(got: Any, want: Any) -> str:
    """Where two JSON reports differ (for a failure's message)."""
    if got == want:
        return ""
    if isinstance(got, dict) and isinstance(want, dict):
        keys = sorted(k for k in got.keys() | want.keys() if got.get(k) != want.get(k))
        return "; the report differs at " + ", ".join(
            f"{k}: {str(got.get(k))[:300]} (genuine: {str(want.get(k))[:300]})" for k in keys)
    return f"; the report is {str(got)[:300]}"


def cli(home: Path | None, *args: str | Path, state: Path | None = None) -> Result:
    pre = ["--ledger", str(home)] if home is not None else []
    env = {"TRAJLEDGER_STATE_DIR": str(state)} if state is not None else None
    return testkit.new_runner().invoke(main, [*pre, *map(str, args)], env=env)


UNAUTHENTICATED = re.compile(r"created [^ ]+ \(unauthenticated\)")
"""The bundle's creation time as its report shows it: ``bundle.json`` says it, nothing signs
it, and the report says so."""


def bundle_report(out: str, path: Path, genuine: Path) -> Any:
    """A bundle's JSON report (the first line of ``out``), the mutated bundle's path written
    as the genuine one's and its unauthenticated creation time left out."""
    text = out.splitlines()[0].replace(str(path), str(genuine))
    return json.loads(UNAUTHENTICATED.sub("created (unauthenticated)", text))


def python_m_verify(*args: str | Path) -> tuple[int, str, str]:
    """``python -m trajledger.verify ARGS`` in process: (exit, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = verify_main([str(a) for a in args])
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    text = out.getvalue() + err.getvalue()
    assert code in (0, 1, 2, 3), f"python -m trajledger.verify {args}: exit {code}: {text}"
    assert "Traceback" not in text and "BUG:" not in text, text
    return code, out.getvalue(), err.getvalue()


# -- the genuine artifacts -------------------------------------------------------------------


@dataclass
class Party:
    """A ledger and its user's state, as they were, before each case (`reset`): the ledger put
    back in place (`tamperkit.Pristine`), the state copied afresh to a directory of its own.
    (A state database replaced in place under a connection that a case left open, to be
    closed by the garbage collector, fails with "disk I/O error".)"""

    home: Path
    state: Path
    work: Path
    pristine: tk.Pristine
    count: int = 0

    @classmethod
    def keep(cls, home: Path, state: Path, work: Path) -> Party:
        """Work copies (under ``work``) of ``home`` and ``state`` as they are now."""
        shutil.copytree(home, work / "home", symlinks=True)
        shutil.copytree(state, work / "state")
        # Its user knows the work copy (a directory's first use pins its origin there) and has
        # indexed its log (the user's index catches up with the log when first read).
        r = cli(work / "home", "reindex", state=work / "state")
        assert r.exit_code == 0, r.output
        gc.collect()  # the connections of the commands that made them (in reference cycles)
        party = cls(work / "home", work / "state", work, tk.Pristine(work / "home"))
        party.reset()
        return party

    def reset(self) -> None:
        self.pristine.reset(self.home)
        self.count += 1
        self.state = self.work / f"state-{self.count}"
        shutil.copytree(self.work / "state", self.state)

    def run(self, *args: str | Path) -> Result:
        return cli(self.home, *args, state=self.state)

    def snapshot(self) -> tuple[dict[str, tuple[str, int]], dict[str, str]]:
        """Every file of the ledger (bytes and mode), and of the user's state: its files but
        the SQLite databases, and each database's rows (its write-ahead log included)."""
        state = {}
        for path in sorted(self.state.rglob("*")):
            rel = str(path.relative_to(self.state))
            if path.name.endswith(".sqlite"):
                con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
                try:
                    state[rel] = "\n".join(con.iterdump())
                finally:
                    con.close()
            elif path.is_file() and not path.name.endswith(("-wal", "-shm")):
                state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        return tk.snapshot(self.home), state

    def log(self) -> list[dict[str, Any]]:
        """``log show --json``, each entry without its time (set by this log's writer)."""
        r = self.run("log", "show", "--json")
        assert r.exit_code == 0, r.output
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
        return [{k: v for k, v in row.items() if k != "time"} for row in rows]

    def imports(self) -> list[Any]:
        """The predicate of each import record: what the importer signed (the foreign log's
        checkpoint, each entry with its inclusion proof, the size applied)."""
        out = []
        for row in self.log():
            if row["kind"] == "import":
                r = self.run("show", row["envelope"], "--json")
                assert r.exit_code == 0, r.output
                out.append(json.loads(r.stdout)["predicate"])
        return out

    def objects(self) -> set[str]:
        return {p.name for p in (self.home / "objects").rglob("*") if p.is_file()}


@dataclass
class World:
    """The genuine artifacts, each with what its reader reports of it."""

    root: Path
    vendor: Vendor
    policy: Path
    bundle: Path
    members: list[tuple[str, bytes]]
    update: Path
    update_members: list[tuple[str, bytes]]
    fresh_buyer: Party
    """A buyer that trusts the vendor and has imported nothing."""
    buyer: Party
    """The buyer once the bundle is imported: an update stream's reader."""
    imported: tuple[list[dict[str, Any]], set[str], list[Any]]
    """The fresh buyer's log and objects after importing the genuine bundle."""
    updated: tuple[list[dict[str, Any]], set[str], list[Any]]
    """The buyer's, after importing the genuine update stream."""
    bundle_report: Any
    ledger: Party
    """A copy of a quickstart ledger."""
    checkpoint: str
    ledger_reports: dict[str, Any]
    files: Path
    envelope: Path
    pubkey: Path
    envelope_report: Any
    proof: bytes
    proof_entry: bytes
    vkey: str

    def scratch(self, name: str) -> Path:
        path = self.root / name
        if path.exists():
            shutil.rmtree(path)
        path.mkdir()
        return path


def _imported(party: Party, bundle: Path
              ) -> tuple[list[dict[str, Any]], set[str], list[Any]]:  # fmt: skip
    r = party.run("import", bundle, "--key", "approver", "--json")
    assert r.exit_code == 0, r.output
    return party.log(), party.objects(), party.imports()


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory,
          quickstart_template: testkit.Template[str]) -> World:  # fmt: skip
    """Built once per session (an xdist worker), not per module: under ``--dist worksteal`` a
    worker that ran some of this module's tests, then others, then stole the rest of it, built
    a module fixture again (three builds of 9 to 28 s in the lead's run of fb1f1c43, two
    workers). Every command here runs with a user state of its own (a party's, or
    ``verify-state``), never the session's."""
    root = tmp_path_factory.mktemp("mutation")
    (root / "mutated").mkdir()
    vendor = Vendor(root, "vendor", "vendor.example/log")
    buyer = Buyer(root, [vendor])
    fresh = Party.keep(buyer.home, buyer.state, root / "work-fresh")
    applied = vendor.size()
    vendor.run("revoke", vendor.batches[0], "--reason", "consent withdrawn", "--key", "vendor")
    update = root / "update.tar.zst"
    vendor.run("export", "--updates-since", str(applied), "--out", update)
    buyer.run("import", vendor.bundle, "--key", "approver")
    after = Party.keep(buyer.home, buyer.state, root / "work-buyer")
    imported = _imported(fresh, vendor.bundle)
    fresh.reset()
    updated = _imported(after, update)
    after.reset()
    policy = vendor.home / "policy.toml"
    r = cli(None, "verify", vendor.bundle, "--policy", policy, "--json",
            state=root / "verify-state")  # fmt: skip
    assert r.exit_code == 0, r.output
    genuine_report = bundle_report(r.stdout, vendor.bundle, vendor.bundle)
    proof = vendor.run("log", "proof", "2").stdout.encode()
    entry = dict(tk.bundle_members(vendor.bundle))["entries/2"]
    # A quickstart ledger (keys in the clear), its checkpoint's lineage and its log as reported.
    qs = root / "quickstart"
    qs.mkdir()
    with testkit.user_state(qs / "state0"):
        testkit.copy_template(quickstart_template, qs / "home0")
        files = root / "model"
        files.mkdir()
        (files / "weights.bin").write_bytes(bytes(range(256)) * 4)
        (files / "README.md").write_text("a model\n")
        envelope = root / "model.intoto.json"
        r = cli(qs / "home0", "sign", files, "--key", "vendor", "--out", envelope)
        assert r.exit_code == 0, r.output
        ledger = Party.keep(qs / "home0", qs / "state0", qs / "work")
    pubkey = root / "vendor.pub"
    pubkey.write_bytes((ledger.home / "keys" / "vendor.pub").read_bytes())
    r = cli(None, "verify", files, "--envelope", envelope, "--pubkey", pubkey, "--json",
            state=root / "verify-state")  # fmt: skip
    assert r.exit_code == 0, r.output
    envelope_report = json.loads(r.stdout)
    ckpt = quickstart_template.value
    reports = {}
    for name, args in _LEDGER_READERS.items():
        r = ledger.run(*[ckpt if a == "REF" else a for a in args])
        assert r.exit_code == 0, r.output
        reports[name] = json.loads(r.stdout)
    ledger.reset()
    return World(
        root, vendor, policy, vendor.bundle, tk.bundle_members(vendor.bundle), update,
        tk.bundle_members(update), fresh, after, imported, updated, genuine_report,
        ledger, ckpt, reports, files, envelope, pubkey, envelope_report, proof, entry,
        vendor.vkey(),
    )  # fmt: skip


_LEDGER_READERS = {
    "verify": ("verify", "REF", "--json", "--skip-data"),
    "log verify": ("log", "verify", "--json", "--skip-data"),
    "show": ("show", "REF", "--json"),
}


# -- the properties --------------------------------------------------------------------------


def test_envelopes_and_keys(world: World) -> None:
    """``verify FILES --envelope E --pubkey K`` of a mutated envelope or public key."""

    @cases(200)
    @given(target=st.sampled_from(["envelope", "pubkey"]), data=st.data())
    def check(target: str, data: st.DataObject) -> None:
        genuine = {"envelope": world.envelope, "pubkey": world.pubkey}
        op, bad = data.draw(mutate(genuine[target].read_bytes()))
        path = world.root / f"mutated-{target}"
        path.write_bytes(bad)
        given_ = {**genuine, target: path}
        r = cli(None, "verify", world.files, "--envelope", given_["envelope"], "--pubkey",
                given_["pubkey"], "--json")  # fmt: skip
        what = f"{target} {op} {bad[:300]!r}"
        if judged(r, what) == 0:
            verified(target, op, what, json.loads(r.stdout) == world.envelope_report,
                     harmless(target, genuine[target].read_bytes(), bad))

    check()


MEMBER_OPS = ("drop", "duplicate-member", "swap-members", "reorder")
BUNDLE_PARTS = ("bundle.json", "checkpoint", "entries", "proofs", "policy", "objects",
                "structure", "file")  # fmt: skip
"""What of a bundle is mutated: a member of each kind, the members' set and order, the tar or
zstd bytes; each part is given its own cases."""


def _member_kind(name: str) -> str:
    return name.split("/", 1)[0] if "/" in name else name


@st.composite
def mutated_bundle(draw: st.DrawFn, members: list[tuple[str, bytes]], part: str
                   ) -> tuple[str, str, list[tuple[str, bytes]] | bytes]:  # fmt: skip
    """``(target, op, members or the whole file's bytes)``: a bundle with one mutation, of a
    member of the kind ``part`` (`BUNDLE_PARTS`), its ``structure`` or its ``file``."""
    if part == "file":
        tarred = tk.tar_bytes(members)
        plain = draw(st.booleans())  # mutate the tar stream, or the compressed bytes
        blob = tarred if plain else zstandard.ZstdCompressor().compress(tarred)
        op, bad = draw(mutate(blob))
        return ("bundle:tar" if plain else "bundle:zstd"), op, (
            zstandard.ZstdCompressor().compress(bad) if plain else bad)
    out = list(members)
    if part == "structure":
        op = draw(st.sampled_from(MEMBER_OPS))
        i = draw(st.integers(1 if op != "drop" else 0, len(out) - 1))
        j = draw(st.integers(1, len(out) - 1).filter(lambda j: j != i))
        if op == "drop":
            del out[i]
        elif op == "duplicate-member":
            out.insert(j, out[i])
        elif op == "swap-members":
            out[i], out[j] = (out[i][0], out[j][1]), (out[j][0], out[i][1])
        else:
            out.insert(j, out.pop(i))
        return "bundle:members", op, out
    i = draw(st.sampled_from([k for k, (n, _) in enumerate(out) if _member_kind(n) == part]))
    name, data = out[i]
    op, bad = draw(mutate(data))
    out[i] = (name, bad)
    # Mostly as a tamperer does it: bundle.json made to agree (else it refuses on its own).
    reindex = name != "bundle.json" and draw(st.sampled_from([True, True, True, False]))
    if reindex:  # bundle.json made to agree: only the signed records can tell
        index = json.loads(out[0][1])
        for m in index["members"]:
            if m["name"] == name:
                m["size"], m["sha256"] = len(bad), hashlib.sha256(bad).hexdigest()
        out[0] = ("bundle.json", json.dumps(index, sort_keys=True, separators=(",", ":"))
                  .encode())  # fmt: skip
    return f"bundle:{_member_kind(name)}", op + ("+reindex" if reindex else ""), out


def _write(path: Path, bundle: list[tuple[str, bytes]] | bytes) -> Path:
    if isinstance(bundle, bytes):
        path.write_bytes(bundle)
        return path
    return tk.write_bundle(path, bundle)


@pytest.mark.parametrize("part", BUNDLE_PARTS)
def test_bundles_verified(world: World, part: str) -> None:
    """``trajledger verify BUNDLE`` and ``python -m trajledger.verify`` of a mutated bundle."""

    @cases(50)
    @given(bundle=mutated_bundle(world.members, part),
           reader=st.sampled_from(["cli", "python -m"]))  # fmt: skip
    def check(bundle: tuple[str, str, list[tuple[str, bytes]] | bytes], reader: str) -> None:
        target, op, content = bundle
        path = _write(world.root / "mutated" / world.bundle.name, content)
        what = f"{reader} {target} {op}"
        if reader == "cli":
            r = cli(None, "verify", path, "--policy", world.policy, "--json",
                    state=world.scratch("verify-state"))  # fmt: skip
            code, out = judged(r, what), r.stdout
        else:
            with _state(world.scratch("verify-state")):
                code, out, _err = python_m_verify(path, "--policy", world.policy, "--json")
        if code == 0:
            got = bundle_report(out, path, world.bundle)
            verified(target, op, what + _differs(got, world.bundle_report),
                     got == world.bundle_report,
                     _bundle_harmless(world.members, content, reads_proofs=False))

    check()


@contextlib.contextmanager
def _state(directory: Path) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as m:
        m.setenv(testkit.STATE_ENV, str(directory))
        yield


def _without_import_records(log: list[dict[str, Any]], objects: set[str]
                            ) -> tuple[list[dict[str, Any]], set[str]]:  # fmt: skip
    """An import's own record is signed at its time: its envelope differs from run to run."""
    mine = {row["envelope"].removeprefix("sha256:") for row in log if row["kind"] == "import"}
    return ([{k: v for k, v in row.items() if not (row["kind"] == "import" and k == "envelope")}
             for row in log], objects - mine)  # fmt: skip


@pytest.mark.parametrize(("kind", "part"), [("bundle", p) for p in BUNDLE_PARTS]
                         + [("update", "any")])  # fmt: skip
def test_bundles_and_updates_imported(world: World, kind: str, part: str) -> None:
    """``trajledger import`` of a mutated bundle into a fresh buyer, and of a mutated update
    stream into a buyer that imported the bundle: refused, the buyer is as it was."""
    buyer = world.fresh_buyer if kind == "bundle" else world.buyer
    members = world.members if kind == "bundle" else world.update_members
    parts = [part] if part != "any" else sorted(
        {_member_kind(n) for n, _ in members} | {"structure", "file"})

    @cases(12 if kind == "bundle" else 40)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        target, op, content = data.draw(mutated_bundle(members, data.draw(st.sampled_from(
            parts))))
        path = _write(world.root / "mutated" / world.bundle.name, content)
        what = f"import {kind} {target} {op}"
        buyer.reset()
        before = buyer.snapshot()
        r = buyer.run("import", path, "--key", "approver", "--json")
        if judged(r, what) == 0:
            genuine = world.imported if kind == "bundle" else world.updated
            verified(f"import-{target}", op, what, _without_import_records(
                buyer.log(), buyer.objects()) == _without_import_records(*genuine[:2])
                and buyer.imports() == genuine[2],
                _bundle_harmless(members, content, reads_proofs=True))
        else:
            after = buyer.snapshot()
            assert after == before, f"{what}: the buyer changed on a refusal: " + "; ".join(
                f"{k}: {_changed(before[i].get(k), after[i].get(k))}" for i in (0, 1)
                for k in sorted(before[i].keys() | after[i].keys())
                if before[i].get(k) != after[i].get(k))

    check()


def test_tlog_proofs(world: World) -> None:
    """``verify_tlog_proof`` of a mutated ``log proof``: what it proves is what the genuine did."""
    log = verifier_from_vkey(world.vkey)
    genuine = verify_tlog_proof(world.proof, world.proof_entry, log)

    @cases(300)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        op, bad = data.draw(mutate(world.proof))
        try:
            got = verify_tlog_proof(bad, world.proof_entry, log)
        except ProvenanceError:
            return
        verified("tlog-proof", op, f"tlog-proof {op} {bad!r}", (
            got, TlogProof.from_bytes(bad).index) == (
            genuine, TlogProof.from_bytes(world.proof).index), None)

    check()


def test_known_checkpoints(world: World) -> None:
    """``python -m trajledger.verify BUNDLE --known-checkpoint NOTE`` of a mutated note."""
    note = (world.vendor.home / "log" / "checkpoint").read_bytes()

    @cases(100)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        op, bad = data.draw(mutate(note))
        path = world.root / "known-checkpoint"
        path.write_bytes(bad)
        with _state(world.scratch("verify-state")):
            code, out, _err = python_m_verify(world.bundle, "--policy", world.policy, "--json",
                                             "--known-checkpoint", path)  # fmt: skip
        if code == 0:
            verified("known-checkpoint", op, f"known checkpoint {op} {bad!r}",
                     bundle_report(out, world.bundle, world.bundle) == world.bundle_report, None)

    check()


LEDGER_FILES = ("log/checkpoint", "log/vkey", "log/tile/0/000.p/20",
                "log/tile/entries/000.p/20", "log-key/log.pub", "keys/vendor.pub",
                "keys/trainer.pub", "ledger.toml", "ENVELOPE")  # fmt: skip
"""The ledger's files mutated: its signed note, the log's key, the last hash tile and entry
bundle, public keys, settings, and the final checkpoint record's envelope (``ENVELOPE``)."""


@pytest.mark.parametrize("name", LEDGER_FILES)
def test_ledger_files(world: World, name: str) -> None:
    """``verify REF``, ``log verify`` and ``show REF`` on a quickstart ledger with one file
    mutated: what verifies reports what the genuine ledger did, for a reason (`show` too: it
    shows the record's evidence); the reader writes nothing."""
    ledger = world.ledger
    ledger.reset()
    r = ledger.run("show", world.checkpoint, "--json")
    envelope = json.loads(r.stdout)["envelope"]
    stored = next(p for p in (ledger.home / "objects").rglob("*")
                  if p.is_file() and p.name == envelope.removeprefix("sha256:"))  # fmt: skip

    ledger.reset()
    pristine = tk.snapshot(ledger.home)  # each case's ledger, but for the file it mutates

    @cases(30)
    @given(reader=st.sampled_from(sorted(_LEDGER_READERS)), data=st.data())
    def check(reader: str, data: st.DataObject) -> None:
        ledger.reset()
        path = stored if name == "ENVELOPE" else ledger.home / name
        genuine = path.read_bytes()
        op, bad = data.draw(mutate(genuine))
        tk.overwrite(path, bad)
        before = tk.snapshot_changed(pristine, ledger.home, [str(path.relative_to(ledger.home))])
        r = ledger.run(*[world.checkpoint if a == "REF" else a for a in _LEDGER_READERS[reader]])
        what = f"{reader}: {name} {op} {bad[:400]!r}"
        if judged(r, what) == 0:
            verified(f"ledger:{name}", op, what,
                     json.loads(r.stdout) == world.ledger_reports[reader],
                     harmless(f"ledger:{name}", genuine, bad))
        assert tk.snapshot(ledger.home) == before, f"{what}: the reader wrote the ledger"

    check()


def test_policies(world: World) -> None:
    """``verify BUNDLE --policy P`` of a mutated trust policy: judged without a traceback (property
    1 only: the policy is the user's own file, not signed, and a mutation that still parses
    may change what it trusts, as its owner's edit would)."""
    text = world.policy.read_bytes()

    @cases(100)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        op, bad = data.draw(mutate(text))
        path = world.root / "policy.toml"
        path.write_bytes(bad)
        r = cli(None, "verify", world.bundle, "--policy", path, "--json",
                state=world.scratch("verify-state"))  # fmt: skip
        judged(r, f"policy {op} {bad!r}")

    check()


# -- findings ----------------------------------------------------------------------------------


def test_show_prints_only_the_envelope_its_log_entry_names(world: World) -> None:
    """Finding 1: ``show DIGEST`` printed the statement of whatever envelope bytes the store
    held (exit 0): an insider who rewrites a checkpoint's envelope (no key needed) had ``show``
    print another training config as the recorded one. The envelope must hash to its entry."""
    ledger = world.ledger
    ledger.reset()
    info = json.loads(ledger.run("show", world.checkpoint, "--json").stdout)
    stored = next(p for p in (ledger.home / "objects").rglob(info["envelope"][7:]))
    envelope = json.loads(stored.read_bytes())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["buildDefinition"]["externalParameters"]["config"]["epochs"] = 3000
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    tk.overwrite(stored, json.dumps(envelope).encode())
    r = ledger.run("show", world.checkpoint, "--json")
    assert judged(r, "show") == 1, r.stdout[:500]
    assert r.stdout == "", r.stdout[:500]
    assert f"object {info['envelope'][:19]}…" in r.stderr, r.stderr


def test_an_import_records_only_inclusion_proofs_that_hold(world: World) -> None:
    """Finding 2: a bundle that holds its log's whole tree is verified by rebuilding the root
    from its entries, which reads no inclusion proof; ``import`` then wrote the bundle's
    proofs, unchecked, into the import record its approvers sign. A proof with a hash flipped
    in transit (``bundle.json`` made to agree; no key needed) was imported (exit 0) and the
    buyer signed it as the vendor's evidence. Each proof recorded must lead to the root."""
    members = list(world.members)
    i = next(k for k, (n, _) in enumerate(members) if n == "proofs/2.tlog-proof")
    lines = members[i][1].split(b"\n")
    lines[2] = base64.b64encode(bytes(32)) # the first hash of the inclusion path
    members[i] = (members[i][0], b"\n".join(lines))
    path = tk.write_bundle(world.root / "mutated" / world.bundle.name, members, reindex=True)
    with _state(world.scratch("verify-state")):  # verify refuses it too (redo15 finding 6)
        code, _out, err = python_m_verify(path, "--policy", world.policy, "--json")
    assert code == 1 and "proofs/2.tlog-proof: " in err, err
    buyer = world.fresh_buyer
    buyer.reset()
    before = buyer.snapshot()
    r = buyer.run("import", path, "--key", "approver")
    assert judged(r, "import") == 1, r.output
    assert "proofs/2.tlog-proof: " in r.stderr, r.stderr
    after = buyer.snapshot()
    assert after == before, [(k, _changed(before[j].get(k), after[j].get(k))) for j in (0, 1)
                             for k in before[j].keys() | after[j].keys()
                             if before[j].get(k) != after[j].get(k)]


# -- bombs -----------------------------------------------------------------------------------


LIMITS = {"memory": 256 << 20, "cpu": 60, "wall": 180}
"""What ``python -m trajledger.verify`` may spend on one bomb (the genuine bundle needs about
35 MiB resident and well under a CPU-second)."""
INDEX_MEMORY = 640 << 20
"""The memory limit of the bomb of a ``bundle.json`` as large as its cap allows (64 MiB):
parsed, it takes about 7 times its size (470 MB resident for 370,000 members; under 256 MiB,
a MemoryError: docs/SECURITY.md, rev17, "Left")."""


def _streamed_bundle(path: Path, members: list[tuple[str, bytes | tuple[int, bytes]]]) -> Path:
    """A bundle whose members are bytes, or ``(size, byte)``: that byte ``size`` times,
    compressed as it is written (a 1 GiB member costs no memory here)."""
    with path.open("wb") as f, zstandard.ZstdCompressor(level=1).stream_writer(f) as out:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = data[0] if isinstance(data, tuple) else len(data)
            out.write(info.tobuf(tarfile.PAX_FORMAT))
            if isinstance(data, tuple):
                chunk = data[1] * (1 << 20)
                for _ in range(data[0] >> 20):
                    out.write(chunk)
                out.write(data[1] * (data[0] & ((1 << 20) - 1)))
            else:
                out.write(data)
            out.write(b"\0" * (-info.size % tarfile.BLOCKSIZE))
        out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    return path


def _limited(memory: int) -> Callable[[], None]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_CPU, (LIMITS["cpu"], LIMITS["cpu"]))

    return limit


def _index(members: list[tuple[str, bytes]], listed: list[dict[str, Any]]) -> bytes:
    index = json.loads(members[0][1])
    index["members"] = sorted(listed, key=lambda m: m["name"])
    return json.dumps(index, sort_keys=True, separators=(",", ":")).encode()


def _listed(name: str, data: bytes | tuple[int, bytes]) -> dict[str, Any]:
    """``bundle.json``'s line for a member (a huge one's digest is not computed: it is
    refused before, or once, it has been read)."""
    if isinstance(data, tuple):
        return {"name": name, "size": data[0], "sha256": "0" * 64}
    return {"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


GIANT = (320 << 20, b" ")
"""A member of 320 MiB (more than `LIMITS` lets the reader hold), of one byte repeated."""

Bomb = list[tuple[str, bytes | tuple[int, bytes]]]


def _swap(members: list[tuple[str, bytes]], name: str, data: bytes | tuple[int, bytes]) -> Bomb:
    """The genuine members, ``name``'s content replaced, ``bundle.json`` agreeing."""
    out: Bomb = [(n, data if n == name else d) for n, d in members[1:]]
    return [("bundle.json", _index(members, [_listed(n, d) for n, d in out])), *out]


def _many(members: list[tuple[str, bytes]], n: int, *, present: bool) -> Bomb:
    """The genuine members and ``n`` more empty objects listed (and ``present``: in the tar)."""
    extra = [f"objects/sha256/{i:064x}" for i in range(n)]
    listed = [_listed(m, d) for m, d in members[1:]] + [_listed(e, b"") for e in extra]
    tail: Bomb = [(e, b"") for e in extra] if present else []
    return [("bundle.json", _index(members, listed)), *members[1:], *tail]


def _object(members: list[tuple[str, bytes]]) -> str:
    return next(n for n, _ in members if n.startswith("objects/"))


BOMBS: dict[str, Callable[[list[tuple[str, bytes]]], Bomb]] = {
    "bundle.json of 320 MiB": lambda m: [("bundle.json", GIANT), *m[1:]],
    "bundle.json listing 340,000 members": lambda m: _many(m, 340_000, present=False),
    "20,000 members": lambda m: _many(m, 20_000, present=True),
    "an entry of 320 MiB": lambda m: _swap(m, "entries/0", GIANT),
    "a policy of 320 MiB": lambda m: _swap(m, "policy/0.json", GIANT),
    "a policy nested 100,000 deep": lambda m: _swap(m, "policy/0.json",
                                                    b"[" * 100_000 + b"]" * 100_000),
    "an object of 320 MiB": lambda m: _swap(m, _object(m), (320 << 20, b"\0")),
}
"""Each bomb: the genuine bundle with one part made huge (about 60 MB of ``bundle.json`` for
340,000 members, under its 64 MiB cap)."""


@pytest.mark.parametrize("bomb", list(BOMBS))
def test_bombs_are_refused_within_limits(world: World, bomb: str, tmp_path: Path) -> None:
    """Property 1 for inputs built to exhaust: ``python -m trajledger.verify`` refuses each
    (exit 1 or 3, a FAIL line, no traceback) in a process limited to `LIMITS`."""
    path = _streamed_bundle(tmp_path / "bomb.tar.zst", BOMBS[bomb](world.members))
    r = subprocess.run(
        [sys.executable, "-m", "trajledger.verify", path, "--policy", world.policy],
        preexec_fn=_limited(INDEX_MEMORY if "listing" in bomb else LIMITS["memory"]),
        capture_output=True, text=True, timeout=LIMITS["wall"],
        env={**os.environ, "TRAJLEDGER_STATE_DIR": str(tmp_path / "state")}, check=False,
    )  # fmt: skip
    assert r.returncode in (1, 3), f"{bomb}: exit {r.returncode}: {r.stderr[-2000:]}"
    assert "Traceback" not in r.stderr and "BUG:" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.startswith("FAIL: "), r.stderr[-2000:]
