"""The table scripts/bench-e2e-runs prints: one build's runs one after the other, each run's CPU per million with
kcat's CPU on the same topic beside it (the machine's own speed that hour), then the median, the mean, the range
and how many runs were at or under a limit.

    python3 scripts/e2e/runs_summary.py FOLDER RUNS [LIMIT]    reads FOLDER/run-N.json; LIMIT defaults to 2.0

One run says little about a target of CPU per million on a shared machine: one build's runs spread by more than
most changes to it (BENCHMARKS.md, 2026-12-07: 1.67-2.49 s over 26 runs of one binary).
"""

import statistics
import sys

from pairs_summary import FIGURES, load_runs

# A ratio to kcat's rate under this misses the end-to-end target (BENCHMARKS.md, issue "one owner per record").
RATIO_TARGET = 0.3


def summary(runs, limit=2.0):
    """Lines for `runs`, in the order they ran."""
    if not runs:
        raise ValueError("no runs")
    lines = ["CPU s per million: all / librdkafka's threads / the worker's own; kcat's CPU s per million on the same "
             "topic; ratio to kcat's rate",
             " run  all / librdkafka / own    kcat   ratio  missing  duplicates"]
    for i, run in enumerate(runs):
        cells = " / ".join(f"{figure(run):.2f}" for _, figure in FIGURES)
        lines.append(f"{i + 1:>4}  {cells:<24} {run['kcat_cpu_s_per_million']:>5.2f}  {run['ratio_to_kcat']:>5.3f}  "
                     f"{run['missing']:<8} {run['duplicates']}")
    for name, figure in FIGURES:
        values = [figure(run) for run in runs]
        lines.append(f"{name}: median {statistics.median(values):.2f} s, mean {statistics.mean(values):.2f}, "
                     f"{min(values):.2f}-{max(values):.2f}")
    totals = [run["worker_cpu_s_per_million"] for run in runs]
    kcat = [run["kcat_cpu_s_per_million"] for run in runs]
    ratios = [run["ratio_to_kcat"] for run in runs]
    lines.append(f"at or under {limit:.2f} s: {sum(value <= limit for value in totals)} of {len(runs)}; "
                 f"ratio to kcat at least {RATIO_TARGET}: {sum(ratio >= RATIO_TARGET for ratio in ratios)} of {len(runs)}")
    lines.append(f"kcat's CPU s per million (the machine's speed): median {statistics.median(kcat):.2f}, "
                 f"{min(kcat):.2f}-{max(kcat):.2f}")
    lines.append(f"missing {sum(run['missing'] for run in runs)}, duplicates {sum(run['duplicates'] for run in runs)}")
    return lines


def main():
    folder, count = sys.argv[1], int(sys.argv[2])
    limit = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    print("\n".join(summary(load_runs(folder, "run", count), limit)))


if __name__ == "__main__":
    main()
