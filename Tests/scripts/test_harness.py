"""The end-to-end harness's worker configuration."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "e2e"))

import harness  # noqa: E402


def consumer_properties(tmp_path, given):
    path = harness.worker_config(str(tmp_path), "127.0.0.1:9092", 1, 2, 3, consumer_properties=given)
    # The block's entries, `    key: "value"`, up to the next top-level key.
    with open(path) as f:
        lines = f.read().split("  consumer_properties:\n", 1)[1].split("\napps:", 1)[0].splitlines()
    entries = [(key.strip(), value.strip().strip('"')) for key, value in (line.split(": ", 1) for line in lines)]
    keys = [key for key, _ in entries]
    # A key written twice makes the worker refuse its configuration.
    assert len(keys) == len(set(keys)), f"a key twice: {keys}"
    return dict(entries)


def test_a_given_property_replaces_the_default_of_the_same_name(tmp_path):
    properties = consumer_properties(tmp_path, {"session.timeout.ms": "60000", "fetch.wait.max.ms": "10"})
    assert properties == {
        "session.timeout.ms": "60000",
        "group.instance.id": "bench-worker-1",
        "receive.message.max.bytes": "1000000000",
        "fetch.wait.max.ms": "10",
    }


def test_without_given_properties_the_defaults_stay(tmp_path):
    assert consumer_properties(tmp_path, None)["session.timeout.ms"] == "6000"


def test_thread_usage_splits_the_same_cpu_and_counts_page_faults():
    import signal
    import subprocess
    # A process that faults in 64 MiB and spins a little, then is stopped so that its counters hold still.
    child = subprocess.Popen([sys.executable, "-c",
                              "import sys, time\n"
                              "b = bytearray(64 << 20)\n"
                              "for i in range(0, len(b), 4096): b[i] = 1\n"
                              "t = time.time()\n"
                              "while time.time() - t < 0.3: pass\n"
                              "print('ready', flush=True)\n"
                              "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGSTOP)
        worker = harness.Worker.__new__(harness.Worker)
        worker.process = child
        split, usage = worker.thread_cpu(), worker.thread_usage()
        assert abs((usage["user"] + usage["system"]) - (split["librdkafka"] + split["worker"])) < 1e-9
        assert usage["user"] >= 0.2
        # 64 MiB is 16,384 pages; none of the threads is librdkafka's.
        assert usage["worker_page_faults"] >= 16384
        assert usage["librdkafka_page_faults"] == 0 and usage["librdkafka_system"] == 0
    finally:
        child.kill()
        child.wait()


def worker_tunables(tmp_path, monkeypatch, given):
    """What GLIBC_TUNABLES the harness's worker process sees, with `given` (or nothing) in the caller's environment."""
    seen = tmp_path / "tunables"
    binary = tmp_path / "pushworker"
    binary.write_text(f'#!/bin/sh\nprintf "%s" "${{GLIBC_TUNABLES-unset}}" > {seen}\n')
    binary.chmod(0o755)
    if given is None:
        monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    else:
        monkeypatch.setenv("GLIBC_TUNABLES", given)
    worker = harness.Worker(str(binary), "unused.yaml", str(tmp_path), 0)
    assert worker.process.wait(timeout=10) == 0
    return seen.read_text()


def test_the_worker_runs_with_the_images_allocator_settings(tmp_path, monkeypatch):
    image = harness.image_environment("GLIBC_TUNABLES")
    assert image and "glibc.malloc.top_pad=" in image
    assert worker_tunables(tmp_path, monkeypatch, None) == image


def test_the_callers_allocator_settings_win(tmp_path, monkeypatch):
    assert worker_tunables(tmp_path, monkeypatch, "glibc.malloc.top_pad=131072") == "glibc.malloc.top_pad=131072"
