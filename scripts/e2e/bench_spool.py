"""A long feedback list. By default a spool left by an earlier run (a long list read while the broker was away),
which a worker produces on start; with --visit, the simulator's feedback service holding the list, which the worker
reads (spooling each read) and produces once it polls. Run through scripts/bench-spool. Prints the time from the
worker's start until the feedback topic has gained every event and the spool directory is empty, and the worker's
peak RSS then, next to the same worker with no list."""

import os
import sys
import tempfile
import time

from confluent_kafka import Consumer, TopicPartition

import harness as h


def spool_line(n):
    """One feedback event as the poller spools it (FeedbackEvent's JSON)."""
    return ('{"app":"%s","environment":"production","token":"%s","timestamp":"2026-11-01T00:00:00Z",'
            '"timestamp_unix":1793491200,"received_at":"2026-11-30T00:00:00.000Z"}\n' % (h.APP, h.token(n)))


def feedback_end(servers):
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "bench-spool-reader", "log_level": 3})
    _, high = consumer.get_watermark_offsets(TopicPartition(h.FEEDBACK, 0), timeout=10)
    consumer.close()
    return high


SPOOL_FILE = "1790000000000-%s-production.jsonl" % h.APP


def write_spool(workdir, events):
    """Makes `workdir`/spool with a spool file of `events` events (none: the directory only); returns its path."""
    spool = os.path.join(workdir, "spool")
    os.makedirs(spool)
    if events:
        with open(os.path.join(spool, SPOOL_FILE), "w") as f:
            for n in range(events):
                f.write(spool_line(n))
    return spool


def worker_starter(binary, workdir, servers, gateway_port, feedback_port, group):
    """A function that starts a worker (in consumer group `group`, spooling in `workdir`/spool), again each call."""
    http_port = h.free_port()
    config = h.worker_config(workdir, servers, gateway_port, feedback_port, http_port, instance=group, group_id=group)
    return lambda: h.Worker(binary, config, workdir, http_port)


def run(binary, workdir, servers, gateway_port, feedback_port, spooled, expected, timeout=600):
    """Starts a worker with `spooled` events in its spool; returns (seconds until the feedback topic has gained
    `expected` events and the spool is empty, peak RSS bytes)."""
    spool = write_spool(workdir, spooled)
    before = feedback_end(servers)
    start = worker_starter(binary, workdir, servers, gateway_port, feedback_port, f"bench-spool-{expected}")
    worker = start()
    began = time.time()
    while os.listdir(spool) or not worker.metrics() or feedback_end(servers) - before < expected:
        if worker.process.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.process.returncode}; see {workdir}/worker.log")
        if time.time() - began > timeout:
            raise SystemExit(f"the feedback topic did not gain {expected} events in time; see {workdir}/worker.log")
        time.sleep(0.05)
    seconds = time.time() - began
    time.sleep(1)  # what follows the last acknowledgement (the producer's queue drained) counts too
    _, peak, _ = worker.proc()
    worker.terminate()
    return seconds, peak


def cut_short(binary, workdir, servers, gateway_port, feedback_port, spooled, cut_at, timeout=600):
    """Starts a worker with `spooled` events in its spool, stops it (SIGTERM) once the feedback topic has gained
    `cut_at` of them, and starts it again until the spool is empty. Returns (events the first run left on the
    topic, events on the topic in all, the progress the first run recorded or None)."""
    name = os.path.join(write_spool(workdir, spooled), SPOOL_FILE)
    before = feedback_end(servers)
    start = worker_starter(binary, workdir, servers, gateway_port, feedback_port, "bench-spool-cut")
    worker = start()
    began = time.time()
    while feedback_end(servers) - before < cut_at:
        if worker.process.poll() is not None or time.time() - began > timeout:
            raise SystemExit(f"the worker did not produce {cut_at} events; see {workdir}/worker.log")
        time.sleep(0.01)
    worker.terminate()
    first = feedback_end(servers) - before
    progress = None
    if os.path.exists(name + ".acked"):
        with open(name + ".acked") as f:
            progress = int(f.read())
    worker = start()
    began = time.time()
    while os.path.exists(name):
        if worker.process.poll() is not None or time.time() - began > timeout:
            raise SystemExit(f"the restarted worker did not finish the spool; see {workdir}/worker.log")
        time.sleep(0.05)
    time.sleep(1)
    worker.terminate()
    return first, feedback_end(servers) - before, progress


def main():
    args = h.bench_arguments(__doc__, "events", 500_000, flags={
        "--visit": "the list in the feedback service, not a spool",
        "--cut": "stop the worker part-way through the spool and start it again: what it produces twice"})
    kind = "listed" if args.visit else "spooled"
    workdir = tempfile.mkdtemp(prefix="bench-spool-")
    broker = h.Broker(workdir)
    simulator = None
    try:
        servers = broker.start()
        broker.create_topics(6)
        if args.cut:
            simulator = h.Simulator(args.binary, workdir)
            first, total, progress = cut_short(args.binary, os.path.join(workdir, "cut"), servers, simulator.gateway,
                                               simulator.feedback, args.events, args.events * 3 // 10)
            again = total - args.events
            print(f"cut: {first} of {args.events} events on the topic when the worker stopped (progress recorded: "
                  f"{'none' if progress is None else f'{progress // len(spool_line(0))} events'}); after the restart "
                  f"{total} in all, {again} produced twice", flush=True)
            h.write_results(args.json, {"cut": {"events": args.events, "first": first, "total": total, "again": again}})
            return 0 if total >= args.events else 1
        results = {}
        for label, events in (("no list", 0), (kind, args.events)):
            run_dir = os.path.join(workdir, label.replace(" ", "-"))
            os.makedirs(run_dir)
            # A simulator per run: the service forgets a list once it has sent it.
            feedback = []
            if args.visit and events:
                feedback = ["--feedback", os.path.join(run_dir, "feedback.txt")]
                with open(feedback[1], "w") as f:
                    for n in range(events):
                        f.write(f"{h.token(n)} 1793491200\n")
            if simulator:
                simulator.stop()
            simulator = h.Simulator(args.binary, run_dir, feedback)
            seconds, peak = run(args.binary, run_dir, servers, simulator.gateway, simulator.feedback,
                                0 if args.visit else events, events)
            results[label] = {"events": events, "seconds": round(seconds, 2), "peak_rss_mib": round(peak / 2**20, 1)}
            print(f"{label}: {events} events {kind}, all produced and the spool empty after {seconds:.2f} s, "
                  f"peak RSS {peak / 2**20:.1f} MiB", flush=True)
        extra = results[kind]["peak_rss_mib"] - results["no list"]["peak_rss_mib"]
        size = len(spool_line(0)) * args.events / 2**20
        print(f"peak RSS with the list less without: +{extra:.1f} MiB for {args.events} events {kind} "
              f"({size:.0f} MiB spooled)")
        h.write_results(args.json, results)
        return 0
    finally:
        h.tear_down(workdir, simulator, broker)


if __name__ == "__main__":
    sys.exit(main())
