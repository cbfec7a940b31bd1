"""scripts/reap: the command's status comes back, and what the command left running is stopped."""
import os
import subprocess
import time

REAP = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "reap")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def run(script):
    return subprocess.run([REAP, "bash", "-c", script], capture_output=True, text=True, timeout=30)


def test_the_commands_status_comes_back():
    assert run("exit 0").returncode == 0
    assert run("exit 7").returncode == 7
    assert run("kill -SEGV $$").returncode == 128 + 11


def test_nothing_left_running_says_nothing():
    result = run("sleep 0.1 & wait")
    assert result.returncode == 0
    assert result.stderr == ""


def test_an_orphan_is_stopped_and_named(tmp_path):
    pids = tmp_path / "pids"
    # The inner shell exits at once, so its sleep loses its parent, as a crashed test process's children do.
    result = run(f"(sleep 300 & echo $! > {pids}); exit 3")
    assert result.returncode == 3
    orphan = int(pids.read_text())
    assert "stopping 1 process(es)" in result.stderr
    assert f"{orphan} sleep 300" in result.stderr
    deadline = time.monotonic() + 5
    while alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(orphan)


def test_a_process_that_ignores_sigterm_is_killed(tmp_path):
    pids = tmp_path / "pids"
    result = run(f"(trap '' TERM; sleep 300 & echo $! > {pids}); exit 0")
    assert result.returncode == 0
    orphan = int(pids.read_text())
    deadline = time.monotonic() + 5
    while alive(orphan) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(orphan)
