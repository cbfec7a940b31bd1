"""The table scripts/bench-e2e-pairs prints: each pair's CPU per million, before and after, and the ratio of the means.

    python3 scripts/e2e/pairs_summary.py FOLDER PAIRS COMMIT    reads FOLDER/before-N.json and FOLDER/after-N.json
"""

import json
import statistics
import sys

# (heading, the figure in one run's results as bench_e2e.py writes them)
FIGURES = (
    ("all", lambda run: run["worker_cpu_s_per_million"]),
    ("librdkafka's threads", lambda run: run["worker_cpu_s_per_million_by_thread"]["librdkafka"]),
    ("the worker's own", lambda run: run["worker_cpu_s_per_million_by_thread"]["worker"]),
)


def summary(before, after, commit):
    """Lines for runs made alternately: `before[i]` and `after[i]` are pair i + 1."""
    def cells(run):
        return " / ".join(f"{figure(run):.2f}" for _, figure in FIGURES)

    lines = [f"CPU s per million, {commit} (before) and the working tree (after), alternately:",
             "pair  before: all / librdkafka / own    after: all / librdkafka / own    missing  duplicates"]
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        missing = f"{b['missing']}, {a['missing']}"
        lines.append(f"{i + 1:>4}  {cells(b):<33}{cells(a):<33}{missing:<9}{b['duplicates']}, {a['duplicates']}")
    def means(name, figure):
        mean_before = statistics.mean(figure(run) for run in before)
        mean_after = statistics.mean(figure(run) for run in after)
        return f"means, {name}: {mean_before:.2f} -> {mean_after:.2f} s (after / before {mean_after / mean_before:.2f})"

    lines.extend(means(name, figure) for name, figure in FIGURES)
    # Without librdkafka's fetching while the acceptance window runs out (bench_e2e.py's wait_outcomes), where every
    # run has that figure (it needs a poll that saw every notification written before the last outcome).
    key = "worker_cpu_s_per_million_without_idle_tail"
    if all(run.get(key) is not None for run in before + after):
        lines.append("without librdkafka's threads after the last send, per pair: " + ", ".join(
            f"{b[key]:.2f} / {a[key]:.2f}" for b, a in zip(before, after)))
        lines.append(means("without them", lambda run: run[key]))
    return lines


def load_runs(folder, name, count):
    """The results of runs 1 to `count` that bench_e2e.py wrote as FOLDER/NAME-N.json."""
    runs = []
    for i in range(1, count + 1):
        with open(f"{folder}/{name}-{i}.json") as file:
            runs.append(json.load(file))
    return runs


def main():
    folder, pairs, commit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    print("\n".join(summary(load_runs(folder, "before", pairs), load_runs(folder, "after", pairs), commit)))


if __name__ == "__main__":
    main()
