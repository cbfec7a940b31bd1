"""bench_e2e.py's latency split per second (the --probe table)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "e2e"))

import bench_e2e  # noqa: E402


def test_each_event_counts_in_the_second_it_was_produced_in_with_both_latencies():
    # Event n produced at 1000 * (n // 100) + n % 100 ms; the plain consumer has it 5 ms later, the simulator 7 ms
    # after that, except events 150 and 151 (second 1), which reached both late: 2 of 100, so its p99 is theirs.
    receipts, arrivals = {}, {}
    for n in range(300):
        ts = 10_000_000 + 1000 * (n // 100) + n % 100
        arrivals[n] = (ts, ts + 5)
        receipts[n] = (ts, ts + 12)
    for n in (150, 151):
        arrivals[n] = (arrivals[n][0], arrivals[n][0] + 400)
        receipts[n] = (receipts[n][0], receipts[n][0] + 430)
    table = bench_e2e.per_second(receipts, arrivals)
    assert [r["second"] for r in table] == [0, 1, 2]
    assert [r["events"] for r in table] == [100, 100, 100]
    assert [(r["probe_p99"], r["receipt_p99"], r["after_arrival_p99"]) for r in table] == [
        (5, 12, 7), (400, 430, 30), (5, 12, 7)]


def test_an_event_the_plain_consumer_never_saw_is_left_out():
    receipts = {1: (5_000, 5_010), 2: (5_001, 5_011)}
    arrivals = {1: (5_000, 5_004)}
    table = bench_e2e.per_second(receipts, arrivals)
    assert [(r["events"], r["probe_p99"], r["receipt_p99"], r["after_arrival_p99"]) for r in table] == [(1, 4, 10, 6)]


def test_the_idle_tail_is_the_cpu_between_the_last_send_and_the_last_outcome():
    tail = bench_e2e.idle_tail({"librdkafka": 0.80, "worker": 1.30}, {"librdkafka": 1.45, "worker": 1.33}, 1.25)
    assert tail == pytest.approx({"librdkafka": 0.65, "worker": 0.03, "seconds": 1.25})
    # Only librdkafka's threads in the tail are left out; the worker's own settling there still counts.
    assert bench_e2e.cpu_per_million_without_idle_tail(2.9, tail, 1_000_000) == 2.25
    assert bench_e2e.cpu_per_million_without_idle_tail(2.9, tail, 500_000) == 4.5


class _ScriptedWorker:
    """A worker whose counters and thread CPU advance one step per poll, as `wait_outcomes` reads them."""

    def __init__(self, steps):
        self.steps, self.poll_count = steps, 0

        class _Process:
            @staticmethod
            def poll():
                return None
        self.process = _Process()

    def metrics(self):
        step = self.steps[min(self.poll_count, len(self.steps) - 1)]
        self.poll_count += 1
        return {"writes": step[0], "outcomes": step[1]}

    def writes(self, metrics):
        return metrics["writes"]

    def outcomes(self, metrics=None):
        return metrics["outcomes"] if metrics else 0

    def thread_cpu(self):
        return {"librdkafka": 0.5 * self.poll_count, "worker": 0.1 * self.poll_count}

    def proc(self):
        return 9.0, 1024, 1024

    def thread_usage(self):
        return {}


def test_the_tail_starts_at_the_poll_that_finds_everything_written_and_is_polled_faster(monkeypatch):
    # (written, outcomes) per poll: everything written at the third poll, every outcome at the sixth.
    worker = _ScriptedWorker([(10, 0), (60, 0), (100, 0), (100, 40), (100, 90), (100, 100)])
    sleeps = []
    monkeypatch.setattr(bench_e2e.time, "sleep", sleeps.append)
    cpu, _, by_thread, _, tail = bench_e2e.wait_outcomes(worker, 100, timeout=60)
    assert cpu == 9.0
    assert sleeps == [0.25, 0.25, 0.05, 0.05, 0.05]
    # thread_cpu was read after the third poll (1.5 / 0.3) and after the sixth (3.0 / 0.6).
    assert by_thread == pytest.approx({"librdkafka": 3.0, "worker": 0.6})
    assert tail["librdkafka"] == pytest.approx(1.5) and tail["worker"] == pytest.approx(0.3)


def test_no_tail_when_the_same_poll_finds_everything_written_and_settled(monkeypatch):
    worker = _ScriptedWorker([(50, 0), (100, 100)])
    monkeypatch.setattr(bench_e2e.time, "sleep", lambda _: None)
    assert bench_e2e.wait_outcomes(worker, 100, timeout=60)[4] is None


@pytest.mark.parametrize("events,record_bytes", [(1_000_000, 435), (1_000_000, 2_200), (250_000, 435), (7, 435)])
def test_a_backlog_on_the_mock_cluster_gets_the_fewest_partitions_that_keep_it_all(events, record_bytes):
    partitions = bench_e2e.mock_partitions_for(events, record_bytes)
    share = -(-events // partitions) * (record_bytes + bench_e2e.RECORD_OVERHEAD_BYTES)
    assert share <= bench_e2e.MOCK_PARTITION_BYTES * 3 // 4
    assert partitions >= 6
    if partitions > 6:
        # One fewer would fill a partition past three quarters of what the mock keeps.
        fewer = -(-events // (partitions - 1)) * (record_bytes + bench_e2e.RECORD_OVERHEAD_BYTES)
        assert fewer > bench_e2e.MOCK_PARTITION_BYTES * 3 // 4
