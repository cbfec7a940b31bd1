import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "e2e"))

import runs_summary  # noqa: E402


def run(total, librdkafka, own, kcat=0.9, ratio=0.5, missing=0, duplicates=0):
    return {"worker_cpu_s_per_million": total, "missing": missing, "duplicates": duplicates,
            "worker_cpu_s_per_million_by_thread": {"librdkafka": librdkafka, "worker": own},
            "kcat_cpu_s_per_million": kcat, "ratio_to_kcat": ratio}


def test_each_run_is_a_row_with_kcat_beside_it():
    lines = runs_summary.summary([run(1.77, 0.71, 0.98, kcat=1.37, ratio=0.869),
                                  run(2.43, 0.95, 1.41, kcat=1.45, ratio=0.622, missing=1, duplicates=2)])
    assert lines[2].split() == ["1", "1.77", "/", "0.71", "/", "0.98", "1.37", "0.869", "0", "0"]
    assert lines[3].split() == ["2", "2.43", "/", "0.95", "/", "1.41", "1.45", "0.622", "1", "2"]
    assert lines[-1] == "missing 1, duplicates 2"


def test_the_median_mean_and_range_of_each_figure():
    lines = runs_summary.summary([run(1.9, 0.6, 1.2), run(2.4, 1.0, 1.3), run(1.7, 0.5, 1.1), run(2.0, 0.7, 1.2)])
    assert "all: median 1.95 s, mean 2.00, 1.70-2.40" in lines
    assert "librdkafka's threads: median 0.65 s, mean 0.70, 0.50-1.00" in lines
    assert "the worker's own: median 1.20 s, mean 1.20, 1.10-1.30" in lines


def test_a_run_at_the_limit_counts_as_under_it_and_the_ratio_target_is_counted():
    lines = runs_summary.summary([run(2.0, 0.7, 1.2, ratio=0.3), run(2.01, 0.7, 1.2, ratio=0.29),
                                  run(1.5, 0.5, 0.9, ratio=0.8)], limit=2.0)
    assert "at or under 2.00 s: 2 of 3; ratio to kcat at least 0.3: 2 of 3" in lines
    assert "at or under 1.50 s: 1 of 3; ratio to kcat at least 0.3: 2 of 3" in runs_summary.summary(
        [run(2.0, 0.7, 1.2, ratio=0.3), run(2.01, 0.7, 1.2, ratio=0.29), run(1.5, 0.5, 0.9, ratio=0.8)], limit=1.5)


def test_kcats_cpu_is_summarised_as_the_machines_speed():
    lines = runs_summary.summary([run(2.0, 0.7, 1.2, kcat=0.75), run(2.1, 0.7, 1.2, kcat=1.57),
                                  run(1.8, 0.7, 1.2, kcat=0.72)])
    assert "kcat's CPU s per million (the machine's speed): median 0.75, 0.72-1.57" in lines


def test_no_runs_are_refused():
    with pytest.raises(ValueError):
        runs_summary.summary([])


def test_the_runs_are_read_from_the_files_bench_e2e_writes(tmp_path, capsys, monkeypatch):
    for i, total in enumerate([1.8, 2.2, 1.9], start=1):
        (tmp_path / f"run-{i}.json").write_text(json.dumps(run(total, 0.6, 1.1)))
    monkeypatch.setattr(sys, "argv", ["runs_summary.py", str(tmp_path), "3", "2.0"])
    runs_summary.main()
    printed = capsys.readouterr().out.splitlines()
    assert "all: median 1.90 s, mean 1.97, 1.80-2.20" in printed
    assert "at or under 2.00 s: 2 of 3; ratio to kcat at least 0.3: 3 of 3" in printed
