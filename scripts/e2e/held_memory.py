"""Memory per held notification: (RSS holding N notifications - RSS holding n) / (N - n), on librdkafka's mock
cluster (scripts/bench-e2e's MockBroker). The simulator never answers and the acceptance window is longer than the
run, so every notification the worker writes stays held (in the ledger and the engine) until the measurement.

  python3 scripts/e2e/held_memory.py --binary .build-release/.../pushworker [--large 300000] [--small 10000] [--uuid-ids]
      [--rate 50000]   (events offered per second: where the worker falls behind, librdkafka's fetched backlog
                        raises its broker thread's heap for good, and that shows in the figure)
      [--http2]   (the app on the HTTP/2 API, which answers nothing: held in the app's queue and on open streams)
"""

import argparse
import os
import shutil
import tempfile
import time

import harness as h


def held_rss(binary, count, payload, http2=False, rate=50_000):
    workdir = tempfile.mkdtemp(prefix="held-")
    broker = h.MockBroker(os.path.join(os.path.dirname(binary), "kafka-test-helper"))
    simulator = worker = None
    try:
        servers = broker.start()
        if http2:
            # The API answers nothing for ten minutes: each connection holds its streams open, the rest wait in the
            # app's queue (an Apple that has gone slow).
            simulator = h.Simulator(binary, workdir, ["--response-delay-ms", "600000"], api_port=h.free_port())
        else:
            simulator = h.Simulator(binary, workdir)
        http_port = h.free_port()
        config = h.worker_config(workdir, servers, simulator.gateway, simulator.feedback, http_port,
                                 max_in_flight=count + 1000, acceptance_ms=600_000, api_port=simulator.api)
        worker = h.Worker(binary, config, workdir, http_port)
        time.sleep(3)  # joined the group (the worker offers no event for it to the harness)
        producer = h.EventProducer(servers)
        # At a rate the worker keeps up with on average (the mock cluster keeps only ~5 MB per partition); on two
        # shared cores it falls behind at times at 50,000/s, and the figure then includes that (see --rate).
        producer.at_rate(rate, count / rate, payload)

        def held():
            """Notifications held now (None while the worker's metrics do not answer)."""
            metrics = worker.metrics()
            if not metrics:
                return None
            if not http2:
                return worker.writes(metrics)  # every written notification stays held
            return worker.total("pushworker_held_records", metrics=metrics)

        deadline = time.time() + 120
        last, still = None, 0
        while time.time() < deadline and still < 10:
            now = held()
            if now is not None and now >= count:
                break
            # In flight stays a few short of the count on the HTTP/2 API: no change for 5 s ends the wait.
            still = still + 1 if now is not None and now == last and now > 0 else 0
            last = now
            time.sleep(0.5)
        written = None
        while written is None and time.time() < deadline + 30:
            written = held()
        time.sleep(2)
        _, _, rss = worker.proc()
        return written, rss
    finally:
        if worker:
            worker.kill()
        if simulator:
            simulator.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--large", type=int, default=300_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--payload", type=int, default=300)
    parser.add_argument("--rate", type=int, default=50_000, help="events offered per second")
    parser.add_argument("--uuid-ids", action="store_true", help="event ids are UUIDs (36 characters), not e1, e2, ...")
    parser.add_argument("--http2", action="store_true", help="the app goes over the HTTP/2 API, which answers nothing")
    args = parser.parse_args()
    if args.uuid_ids:
        h.event_id = h.uuid_event_id
    small_written, small_rss = held_rss(args.binary, args.small, args.payload, args.http2, args.rate)
    large_written, large_rss = held_rss(args.binary, args.large, args.payload, args.http2, args.rate)
    per = (large_rss - small_rss) / max(1, large_written - small_written)
    print(f"held {small_written}: RSS {small_rss / 2**20:.1f} MiB; held {large_written}: RSS {large_rss / 2**20:.1f} MiB; "
          f"{per:.0f} bytes per held notification")


if __name__ == "__main__":
    main()
