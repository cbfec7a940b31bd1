import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "e2e"))

import pairs_summary  # noqa: E402


def run(total, librdkafka, own, missing=0, duplicates=0):
    return {"worker_cpu_s_per_million": total, "missing": missing, "duplicates": duplicates,
            "worker_cpu_s_per_million_by_thread": {"librdkafka": librdkafka, "worker": own}}


def test_each_pair_is_a_row_with_both_builds_figures():
    lines = pairs_summary.summary([run(5.36, 1.78, 3.46), run(5.01, 1.69, 3.16, duplicates=2)],
                                  [run(4.59, 1.92, 2.58), run(4.00, 1.61, 2.30, missing=1)], "11f69f1")
    assert lines[0].startswith("CPU s per million, 11f69f1 (before)")
    assert lines[2].split() == ["1", "5.36", "/", "1.78", "/", "3.46", "4.59", "/", "1.92", "/", "2.58", "0,", "0", "0,", "0"]
    assert lines[3].split() == ["2", "5.01", "/", "1.69", "/", "3.16", "4.00", "/", "1.61", "/", "2.30", "0,", "1", "2,", "0"]


def test_the_means_and_their_ratio_per_figure():
    lines = pairs_summary.summary([run(5.0, 2.0, 3.0), run(4.0, 1.0, 3.0)], [run(4.0, 2.0, 2.0), run(3.0, 1.0, 2.0)], "abc")
    assert lines[-3] == "means, all: 4.50 -> 3.50 s (after / before 0.78)"
    assert lines[-2] == "means, librdkafka's threads: 1.50 -> 1.50 s (after / before 1.00)"
    assert lines[-1] == "means, the worker's own: 3.00 -> 2.00 s (after / before 0.67)"


def test_pairs_of_unequal_counts_are_refused():
    with pytest.raises(ValueError):
        pairs_summary.summary([run(1, 1, 1)], [], "abc")


def test_the_figures_without_the_idle_tail_when_every_run_has_them():
    with_tail = [dict(run(3.0, 1.4, 1.5), worker_cpu_s_per_million_without_idle_tail=2.4),
                 dict(run(3.2, 1.5, 1.6), worker_cpu_s_per_million_without_idle_tail=2.6)]
    after = [dict(run(2.8, 1.4, 1.3), worker_cpu_s_per_million_without_idle_tail=2.1),
             dict(run(2.9, 1.4, 1.4), worker_cpu_s_per_million_without_idle_tail=2.2)]
    lines = pairs_summary.summary(with_tail, after, "abc")
    assert lines[-2] == "without librdkafka's threads after the last send, per pair: 2.40 / 2.10, 2.60 / 2.20"
    assert lines[-1] == "means, without them: 2.50 -> 2.15 s (after / before 0.86)"
    # One run without it (no poll saw every notification written before the last outcome): no such lines.
    after[1]["worker_cpu_s_per_million_without_idle_tail"] = None
    assert pairs_summary.summary(with_tail, after, "abc")[-1].startswith("means, the worker's own")
