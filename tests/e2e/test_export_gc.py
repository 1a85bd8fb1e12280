"""``trajledger export`` in its own process keeps its walk out of the cyclic garbage collector's
work (exp48, issue 21 item 3): the exchange modules it imports when it runs and the export
itself (the lineage walk, whose records and report live until the bundle is written) run with
the collector off (`clikit.loading`), and the collector is on again once they are done, also
when the export fails.

Each case runs the command's entry point in a fresh interpreter (what it freezes would stay
frozen in the test process).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import testkit


def entry_point(code: str, argv: list[str]) -> tuple[int, list[str]]:
    """Run ``code``, then the ``trajledger`` entry point with ``argv``, then ``code``'s
    ``report()``; the exit status and the lines ``report`` printed (starting ``>``)."""
    program = textwrap.dedent(code) + textwrap.dedent(f"""
        sys.argv = ["trajledger", *{argv!r}]
        from trajledger.__main__ import main
        try:
            main()
        except SystemExit as e:
            status = e.code
        else:
            status = 0
        report()
        sys.exit(status)
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, [ln for ln in done.stdout.splitlines() if ln.startswith(">")]


WATCH_THE_EXPORT = """
    import gc, sys
    from trajledger.ledger import exchange
    seen = []
    real = exchange.export_bundle
    def watched(*args, **kwargs):
        seen.append("off" if not gc.isenabled() else "on")
        return real(*args, **kwargs)
    exchange.export_bundle = watched
    def report():
        print("> export ran with the collector", *seen)
        print("> then", "on" if gc.isenabled() else "off", flush=True)
"""

WATCH_THE_IMPORT = """
    import gc, sys
    seen = []
    class Watch:
        def find_spec(self, name, *args):
            if name == "trajledger.ledger.exchange":
                seen.append("off" if not gc.isenabled() else "on")
    sys.meta_path.insert(0, Watch())
    def report():
        print("> exchange imported with the collector", *seen, flush=True)
"""


def test_the_export_runs_with_the_collector_off_and_turns_it_back_on(
    quickstart_template: testkit.Template[str], tmp_path: Path,
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    out = tmp_path / "b.tar.zst"
    status, lines = entry_point(WATCH_THE_EXPORT, ["--ledger", str(home), "export",
                                                   quickstart_template.value, "--out", str(out)])
    assert status == 0 and out.is_file()
    assert lines == ["> export ran with the collector off", "> then on"]


def test_the_exchange_modules_load_with_the_collector_off(
    quickstart_template: testkit.Template[str], tmp_path: Path,
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    status, lines = entry_point(WATCH_THE_IMPORT, ["--ledger", str(home), "export",
                                                   quickstart_template.value, "--out",
                                                   str(tmp_path / "b.tar.zst")])
    assert status == 0
    assert lines == ["> exchange imported with the collector off"]


def test_a_failed_export_leaves_the_collector_on(
    quickstart_template: testkit.Template[str], tmp_path: Path,
) -> None:
    home = testkit.copy_template(quickstart_template, tmp_path / "vendor")
    status, lines = entry_point(WATCH_THE_EXPORT, ["--ledger", str(home), "export",
                                                   "no-such@1", "--out",
                                                   str(tmp_path / "b.tar.zst")])
    assert status == 3  # (no artifact has this name)
    assert lines == ["> export ran with the collector off", "> then on"]
