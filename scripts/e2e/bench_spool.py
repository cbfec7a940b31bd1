"""A feedback spool left by an earlier run (a long list read while the broker was away): a worker produces it on
start. Run through scripts/bench-spool. Prints the time from the worker's start to an empty spool directory and the
worker's peak RSS then, next to the same worker started with no spool, and checks that the feedback topic gained
every event."""

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


def run(binary, workdir, servers, gateway_port, feedback_port, events, timeout=600):
    """Starts a worker with `events` spooled; returns (seconds until the spool is empty, peak RSS bytes)."""
    os.makedirs(os.path.join(workdir, "spool"))
    if events:
        with open(os.path.join(workdir, "spool", "1790000000000-%s-production.jsonl" % h.APP), "w") as f:
            for n in range(events):
                f.write(spool_line(n))
    http_port = h.free_port()
    config = h.worker_config(workdir, servers, gateway_port, feedback_port, http_port,
                             instance=f"bench-spool-{events}", group_id=f"bench-spool-{events}")
    worker = h.Worker(binary, config, workdir, http_port)
    began = time.time()
    spool = os.path.join(workdir, "spool")
    while os.listdir(spool) or not worker.metrics():
        if worker.process.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.process.returncode}; see {workdir}/worker.log")
        if time.time() - began > timeout:
            raise SystemExit("the spool was not produced in time")
        time.sleep(0.05)
    seconds = time.time() - began
    time.sleep(1)  # what follows the last acknowledgement (the producer's queue drained) counts too
    _, peak, _ = worker.proc()
    worker.terminate()
    return seconds, peak


def main():
    args = h.bench_arguments(__doc__, "events", 500_000)

    workdir = tempfile.mkdtemp(prefix="bench-spool-")
    broker = h.Broker(workdir)
    simulator = None
    try:
        servers = broker.start()
        broker.create_topics(6)
        gateway_port, feedback_port = h.free_port(), h.free_port()
        simulator = h.Simulator(args.binary, workdir, (), gateway_port, feedback_port)
        results = {}
        for label, events in (("no spool", 0), ("spool", args.events)):
            before = feedback_end(servers)
            seconds, peak = run(args.binary, os.path.join(workdir, label.replace(" ", "-")), servers, gateway_port,
                                feedback_port, events)
            produced = feedback_end(servers) - before
            if produced < events:
                raise SystemExit(f"{label}: the feedback topic gained {produced} of {events} events")
            results[label] = {"events": events, "seconds": round(seconds, 2), "peak_rss_mib": round(peak / 2**20, 1),
                              "produced": produced}
            print(f"{label}: {events} events spooled, produced {produced}, spool empty after {seconds:.2f} s, "
                  f"peak RSS {peak / 2**20:.1f} MiB", flush=True)
        extra = results["spool"]["peak_rss_mib"] - results["no spool"]["peak_rss_mib"]
        size = len(spool_line(0)) * args.events / 2**20
        print(f"peak RSS with the spool less without: +{extra:.1f} MiB for a {size:.0f} MiB spool of {args.events} events")
        h.write_results(args.json, results)
        return 0
    finally:
        h.tear_down(workdir, simulator, broker)


if __name__ == "__main__":
    sys.exit(main())
