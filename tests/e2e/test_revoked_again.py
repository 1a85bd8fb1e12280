"""A second revocation by the same key records nothing, whatever the clock (hist38 finding 2;
the exchange histories' seed 117).

A revocation's statement holds its reason and the second it was signed in: the same key
revoking the same artifact again within one second signed the same bytes, which the log keeps
once (``already recorded``, exit 0, nothing new), and a second later a new record (exit 0, one
more entry). So the vendor's log held one revocation or two by the run's timing, and the
buyer's daily ``monitor --fail-on-revocation``, after taking the first in, exited 0 in one run
and 1 in another of the same history. ``revoke`` of an artifact by a key that revoked it
already now answers with that first record (``revoked already``, exit 0, nothing signed), as
it did in the same second and as a run again after a failure that followed the append needs:
one record, and the buyer's answer deterministic: nothing was revoked there since (exit 0).
Another key's revocation is still recorded (it may count where the first does not).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from test_histories_agree import Step
from test_histories_exchange import judge_history, replay, run_history, watch


def test_a_second_revocation_by_the_same_key_records_nothing(tmp_path: Path) -> None:
    run = run_history(tmp_path / "h", [Step("vrecord", ("v2", 0, "orig", False)),
                                       Step("ship", ("v2",)), Step("vrevoke", ("v2",)),
                                       Step("monitor")])
    v, b, m = run.vendor, run.buyer, run.model
    assert all(r.endswith("-> ok") for r in run.ran), run.ran
    digest = m.vendor["v2"].digest
    for _ in range(2):  # at once (most likely the same second), then after a monitor
        size = v.size()
        r = v.cli("revoke", digest, "--reason", "agree26", "--key", "vendor")
        assert r.exit_code == 0 and "revoked already by vendor" in r.stderr, r.output
        assert v.size() == size  # nothing recorded, in the same second or later
        r = watch(v, b, "--fail-on-revocation")
        assert r.exit_code == 0, r.output  # nothing revoked there since
    r = v.cli("revoke", digest, "--reason", "agree26", "--key", "vapprover")
    assert r.exit_code == 0, r.output  # another key: recorded
    r = watch(v, b, "--fail-on-revocation")
    assert r.exit_code == 1, r.output
    # hist39 (hist38's Left): the line says it was revoked here already, and by whom (on
    # e3002ae0 "revoked by ORIGIN", as if new)
    assert re.search(r"WARNING: revoked already here by [0-9a-f]{12} \(log index \d+\); now also "
                     r"by vendor\.example/log\S*: rollout-batch v2 ", r.stderr), r.stderr
    replay(run, [Step("vrevoke", ("v2",)), Step("brevoke", ("v2",)), Step("brevoke", ("v2",))])
    assert all(x.endswith("-> ok") for x in run.ran[-3:]), run.ran
    replay(run, [Step("vcompromise", (None,)), Step("vrevoke", ("v2",))])  # (history 113)
    assert run.ran[-1].startswith("vrevoke(v2) -> refused"), run.ran  # a key declared stolen
    assert judge_history(run) == []


def test_a_revocation_found_again_answers_with_its_own_reason(tmp_path: Path) -> None:
    """hist39 (hist38's Left): ``revoke`` again by the same key, with another ``--reason``,
    answers with the first record, so its ``--json`` ``reason`` is the first record's (on
    e3002ae0 the reason typed this time, which no record holds), and the line says both."""
    run = run_history(tmp_path / "h", [Step("vrecord", ("v2", 0, "orig", False)),
                                       Step("vrevoke", ("v2",))])
    v, digest = run.vendor, run.model.vendor["v2"].digest
    r = v.cli("revoke", digest, "--reason", "agree26", "--key", "vendor", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["reason"] == "agree26", r.output
    assert "not recorded" not in r.stderr, r.output  # the same reason: nothing to say
    size = v.size()
    r = v.cli("revoke", digest, "--reason", "typed again", "--key", "vendor", "--json")
    assert r.exit_code == 0 and v.size() == size, r.output
    got = json.loads(r.stdout)
    assert got["reason"] == "agree26" and got["new"] is False, got
    assert ("revoked already by vendor (log index 3, reason 'agree26': the reason given now, "
            "'typed again', is not recorded); nothing new was signed") in r.stderr, r.output
