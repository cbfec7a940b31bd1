"""bench_e2e.py's latency split per second (the --probe table)."""

import os
import sys

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
