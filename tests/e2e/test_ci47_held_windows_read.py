"""A read of the held windows' kept files that fails, in ``dataset create`` (ci47 finding 7).

``dataset create`` of a train set reads the held side's kept step windows
(``index/features/w13/held-<digest>.filter`` and ``.checked``: seal47's held_windows,
held_filter, window_cache). A read of either that the disk fails (EIO) is passed over in
silence: exit 0, the dataset recorded, no WARNING. The rule test_read_fault_sweep.py holds every
command to (lead26): an I/O error is exit 3 with one ``FAIL:`` line, or, for kept data computed
again from the verified steps, a WARNING that says so. Its CI sample (4 reads of each command)
did not reach these reads while ``dataset create`` made 362 reads; with ci47's trust state read
once a command it makes 179, and the sample's third point is the ``.checked`` read. Under
``TRAJLEDGER_FAULTS=all`` 194aadb1 fails at both (and at ``.grouped``, whose WARNING is worded
otherwise than the sweep's `RECOMPUTED` takes).
"""

from __future__ import annotations

import pytest
import testkit
from test_read_fault_sweep import Work, at_read, problem, work  # noqa: F401 (the fixture)


@pytest.mark.parametrize("kept", [".filter", ".checked"])
def test_a_held_windows_file_that_cannot_be_read_is_said(work: Work, kept: str) -> None:  # noqa: F811
    with testkit.user_state(work.state):
        work.restore()
        size = work.size()
        r = at_read(work, "dataset create", where=kept)
        grew = work.size() != size
    assert problem(r, grew, "") is None, r.output
