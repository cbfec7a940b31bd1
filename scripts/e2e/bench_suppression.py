"""Start-up with a large suppression topic (SPEC section 10): a worker reads N suppression records before it joins
its group. Run through scripts/bench-suppression. Prints the time from the worker's start to /readyz answering 200,
the worker's resident memory then (and the same worker's without suppression, for the difference), and the table's
size as the worker reports it (pushworker_suppressed_tokens)."""

import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from confluent_kafka import Producer

import harness as h


def ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start_until_ready(binary, config, workdir, http_port, timeout=120):
    """Starts a worker; returns (seconds to ready, RSS then, the worker)."""
    worker = h.Worker(binary, config, workdir, http_port)
    began = time.time()
    while not ready(http_port):
        if worker.process.poll() is not None:
            raise SystemExit(f"the worker exited with {worker.process.returncode}; see {workdir}/worker.log")
        if time.time() - began > timeout:
            raise SystemExit("the worker was not ready in time")
        time.sleep(0.05)
    elapsed = time.time() - began
    _, _, rss = worker.proc()
    return elapsed, rss, worker


def main():
    args = h.bench_arguments(__doc__, "records", 1_000_000)

    workdir = tempfile.mkdtemp(prefix="bench-suppression-")
    broker = h.Broker(workdir)
    simulator = None
    try:
        servers = broker.start()
        broker.create_topics(6, suppression=True)
        producer = Producer({"bootstrap.servers": servers, "linger.ms": 5, "acks": "all", "log_level": 3,
                             "queue.buffering.max.messages": 1000000})
        began = time.time()
        for n in range(args.records):
            token = h.token(n)
            key = f"{h.APP}/production/{token}".encode()
            value = ('{"app":"%s","environment":"production","token":"%s","invalidated_at":"2026-11-01T00:00:00Z",'
                     '"reason":"unregistered"}' % (h.APP, token)).encode()
            while True:
                try:
                    producer.produce(h.SUPPRESSED, value, key=key)
                    break
                except BufferError:
                    producer.poll(0.01)
            if n % 10000 == 0:
                producer.poll(0)
        producer.flush(120)
        print(f"produced {args.records} suppression records in {time.time() - began:.1f} s", flush=True)
        time.sleep(3)  # noida-db snapshots every 1-2 s: what a restart would find

        # kcat reading the same topic to its end: what any librdkafka client pays on this broker (noida-db answers a
        # fetch with a partition's whole backlog, KAFKA-TESTING.md).
        kcat = subprocess.run(["/usr/bin/time", "-f", "%M %e", "kcat", "-C", "-b", servers, "-t", h.SUPPRESSED, "-e", "-q",
                               "-X", "receive.message.max.bytes=1000000000", "-f", "%k\\n"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        kcat_kib, kcat_seconds = kcat.stderr.strip().splitlines()[-1].split()
        print(f"kcat read the topic in {float(kcat_seconds):.2f} s, peak RSS {int(kcat_kib) / 1024:.1f} MiB", flush=True)

        gateway_port, feedback_port = h.free_port(), h.free_port()
        simulator = h.Simulator(args.binary, workdir, (), gateway_port, feedback_port)
        results = {}
        for label, suppression in (("without suppression", False), ("with suppression", True)):
            run_dir = os.path.join(workdir, label.replace(" ", "-"))
            os.makedirs(run_dir)
            http_port = h.free_port()
            config = h.worker_config(run_dir, servers, gateway_port, feedback_port, http_port, suppression=suppression,
                                     instance=f"bench-suppression-{suppression}", group_id=f"bench-suppression-{suppression}")
            seconds, rss, worker = start_until_ready(args.binary, config, run_dir, http_port)
            tokens = worker.total("pushworker_suppressed_tokens")
            time.sleep(5)
            _, peak, later = worker.proc()
            worker.terminate()
            results[label] = {"seconds_to_ready": round(seconds, 2), "rss_mib": round(rss / 2**20, 1),
                              "rss_5s_later_mib": round(later / 2**20, 1), "peak_rss_mib": round(peak / 2**20, 1), "tokens": int(tokens)}
            print(f"{label}: ready after {seconds:.2f} s, RSS then {rss / 2**20:.1f} MiB, 5 s later {later / 2**20:.1f} MiB, "
                  f"peak {peak / 2**20:.1f} MiB, suppressed tokens {int(tokens)}", flush=True)
        extra = results["with suppression"]["rss_5s_later_mib"] - results["without suppression"]["rss_5s_later_mib"]
        print(f"resident 5 s after ready, with suppression less without: +{extra:.1f} MiB for {args.records} tokens "
              f"({extra * 2**20 / max(1, args.records):.1f} bytes per token; the table itself is 12 bytes a slot)")
        h.write_results(args.json, results)
        return 0
    finally:
        h.tear_down(workdir, simulator, broker)


if __name__ == "__main__":
    sys.exit(main())
