"""scripts/test-report: what a failed pass's output says in a few lines (a crash, tests that never ended, issues)."""
import os
import subprocess

REPORT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "test-report")

CRASHED_RUN = """\
◇ Test run started.
◇ Suite RestartTests started.
◇ Test sigkillMidway() started.
✔ Test sigkillMidway() passed after 26.6 seconds.
◇ Test refuses(text:) started.
◇ Test case passing 1 argument text → "" to refuses(text:) started.
✔ Test refuses(text:) with 5 test cases passed after 3.340 seconds.
◇ Test shutdownsLoseNothing() started.
◇ Suite FetchTests started.
◇ Test aRewindIsDropped() started.
✘ Test aRewindIsDropped() recorded an issue at FetchTests.swift:72:13: Expectation failed: (count → 2) == 1
✘ Test aRewindIsDropped() failed after 0.2 seconds with 1 issue.
✘ Suite FetchTests failed after 0.2 seconds with 1 issue.
Swift/ContiguousArrayBuffer.swift:691: Fatal error: Index out of range

*** Program crashed: Illegal instruction at 0x00007f2d332f9361 ***

Platform: x86_64 Linux (Debian GNU/Linux 12 (bookworm))

Thread 7 "NIO-ELT-0-#1" crashed:

  0 0x00007f2d332f9361 _assertionFailure(_:_:file:line:flags:) + 353 in libswiftCore.so
  1 [ra] 0x0000555f7e4b1d4e Decoder.next() + 158 in pushworkerPackageTests.xctest at Sources/X.swift:31:25
...

Thread 8 "SGLTN-TP-#0":

  0  0x00007f2d316a3f16 __futex_abstimed_wait_common + 198 in libc.so.6
"""


def report(tmp_path, text, *args):
    log = tmp_path / "pass.log"
    log.write_text(text, encoding="utf-8")
    result = subprocess.run([REPORT, str(log), *args], capture_output=True, text=True, timeout=30, check=True)
    return result.stdout.splitlines()


def test_a_crash_names_its_message_and_the_crashed_threads_frames(tmp_path):
    lines = report(tmp_path, CRASHED_RUN, "132")
    assert "ended by signal 4" in lines
    assert "Swift/ContiguousArrayBuffer.swift:691: Fatal error: Index out of range" in lines
    thread = lines.index('Thread 7 "NIO-ELT-0-#1" crashed:')
    assert "Decoder.next()" in lines[thread + 2]
    assert lines[thread + 3] == "..."
    assert not any("SGLTN" in line for line in lines), "only the crashed thread"


def test_tests_that_never_ended_are_named_and_the_ended_ones_are_not(tmp_path):
    lines = report(tmp_path, CRASHED_RUN, "132")
    still = lines[lines.index("still running when the pass ended:") + 1:]
    still = still[:next((i for i, line in enumerate(still) if not line.startswith("  ")), len(still))]
    assert sorted(still) == ["  Suite RestartTests", "  Test shutdownsLoseNothing()"]


def test_issues_are_listed(tmp_path):
    lines = report(tmp_path, CRASHED_RUN, "132")
    assert "issues recorded (1):" in lines
    assert any("FetchTests.swift:72:13" in line for line in lines)


def test_a_pass_past_its_limit_says_so(tmp_path):
    lines = report(tmp_path, "◇ Test hangs() started.\n", "124", "20m")
    assert "stopped: still running after the time limit (20m)" in lines
    assert "  Test hangs()" in lines


def test_a_plain_failure_adds_nothing_invented(tmp_path):
    lines = report(tmp_path, "◇ Test a() started.\n✔ Test a() passed after 1 seconds.\nFAIL: 1 row\n", "1")
    assert lines == [f"== why the pass failed (exit status 1; whole output: {tmp_path / 'pass.log'})"]
