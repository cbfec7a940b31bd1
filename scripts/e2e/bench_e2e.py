"""End-to-end benchmark: Kafka (noida-db) -> pushworker run -> pushworker simulate. Run through scripts/bench-e2e.

  backlog mode: N events are produced first; kcat's raw consume rate of the same topic is the ceiling; then the
                worker delivers the backlog. Reports notifications/s, the ratio to kcat, peak RSS, CPU s per million.
  rate mode:    events are offered at R/s for S seconds while the worker runs. Reports latency from the Kafka
                record timestamp to the simulator's receipt (p50/p99/p99.9/max), peak RSS and an RSS series
                (every 10 s), CPU s per million. The soak is this mode run for 10 minutes or more.

  CPU s per million is the worker's CPU from its start to the last outcome. Both modes also report the tail: from
  the poll that found every notification written to the last outcome, the worker waits out the acceptance window,
  and librdkafka's threads fetch meanwhile (on noida-db, which answers an empty fetch at once, about half a core).
  The figure without librdkafka's threads in that tail is printed beside it.

  --broker mock runs librdkafka's mock cluster instead of noida-db. It keeps 5 MiB per partition, so a backlog there
  goes to as many partitions as hold it (about 120 for a million 300-byte payloads); kcat's count of the topic
  checks that nothing was dropped.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import harness as h


def wait_ready(worker, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{worker.http_port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if worker.process.poll() is not None:
            raise RuntimeError("the worker exited before it was ready")
        time.sleep(0.1)
    raise RuntimeError("the worker was not ready in time")


def wait_outcomes(worker, total, timeout):
    """Polls the worker's own counters until every event has an outcome; returns (cpu, peak RSS, CPU by thread
    kind, user and system CPU and page faults) at that moment, and the tail: CPU by thread kind and seconds from
    the first poll that found every notification written to the gateway to that moment. In the tail the worker
    only waits out the acceptance window and settles; librdkafka's threads fetch empty answers (at once, on
    noida-db, which does not wait `fetch.wait.max.ms`), a cost per second of that wait, not per event."""
    deadline = time.time() + timeout
    sent = None
    while time.time() < deadline:
        metrics = worker.metrics()
        if worker.outcomes(metrics) >= total:
            cpu, peak, _ = worker.proc()
            by_thread = worker.thread_cpu()
            tail = None if sent is None else idle_tail(sent[1], by_thread, time.monotonic() - sent[0])
            return cpu, peak, by_thread, worker.thread_usage(), tail
        if sent is None and worker.writes(metrics) >= total:
            sent = (time.monotonic(), worker.thread_cpu())
        if worker.process.poll() is not None:
            raise RuntimeError("the worker exited")
        # Once everything is written, the last outcomes are at most an acceptance window away: polled more often
        # then, so the reading is taken at most 50 ms after them (librdkafka fetches on meanwhile).
        time.sleep(0.25 if sent is None else 0.05)
    raise RuntimeError(f"timed out: {worker.outcomes():.0f} of {total} outcomes")


def idle_tail(at_last_send, at_outcomes, seconds):
    """CPU seconds by thread kind between two readings of `Worker.thread_cpu`, and the seconds between them."""
    tail = {kind: at_outcomes[kind] - at_last_send[kind] for kind in at_outcomes}
    tail["seconds"] = seconds
    return tail


def cpu_per_million_without_idle_tail(cpu, tail, total):
    """CPU seconds per million events, less librdkafka's threads in the tail (their fetching while the worker waits
    out the acceptance window: a cost of the wait's length, not of the events)."""
    return round((cpu - tail["librdkafka"]) / total * 1e6, 2)


# librdkafka's mock cluster drops a partition's oldest message sets once the partition holds more than 5 MiB
# (rdkafka_mock.c), silently.
MOCK_PARTITION_BYTES = 5 << 20
# A record's bytes in a partition beyond its value and key: its framing (length, attributes, timestamp and offset
# deltas, header count) and its share of its batch's header, rounded up.
RECORD_OVERHEAD_BYTES = 32


def mock_partitions_for(events, record_bytes, limit=MOCK_PARTITION_BYTES):
    """The fewest input partitions (at least 6, the usual topic) of the mock cluster that keep a backlog of `events`
    records of `record_bytes` each (value and key), each partition filled to at most three quarters of its limit."""
    per_partition = (limit * 3 // 4) // (record_bytes + RECORD_OVERHEAD_BYTES)
    return max(6, -(-events // per_partition))


def kcat_ceiling(servers, total):
    began = time.monotonic()
    kcat = subprocess.run(
        f"kcat -C -b {servers} -t {h.INPUT} -o beginning -e -q -f '%o\\n' -X receive.message.max.bytes=1000000000 | wc -l",
        shell=True, check=True, capture_output=True, text=True)
    elapsed = time.monotonic() - began
    count = int(kcat.stdout.strip())
    if count != total:
        raise RuntimeError(f"kcat read {count} of {total}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return total / elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def latency_summary(sorted_values):
    """p50, p99, p99.9 and max of sorted latencies."""
    return {"p50": h.percentile(sorted_values, 0.5), "p99": h.percentile(sorted_values, 0.99),
            "p999": h.percentile(sorted_values, 0.999), "max": sorted_values[-1] if sorted_values else None}


def per_second(receipts, arrivals):
    """By the second each event was produced in: p99 of record-to-arrival at the probe, of record-to-receipt at the
    simulator, and of arrival-to-receipt (what the worker and the gateway add after a consumer could have it)."""
    seconds = {}
    for n, (ts, received) in receipts.items():
        arrived = arrivals.get(n)
        if arrived is None:
            continue
        row = seconds.setdefault(ts // 1000, ([], [], []))
        row[0].append(arrived[1] - ts)
        row[1].append(received - ts)
        row[2].append(received - arrived[1])
    first = min(seconds) if seconds else 0
    table = []
    for second in sorted(seconds):
        probe, receipt, after = (sorted(v) for v in seconds[second])
        table.append({"second": second - first, "events": len(probe), "probe_p99": h.percentile(probe, 0.99),
                      "receipt_p99": h.percentile(receipt, 0.99), "after_arrival_p99": h.percentile(after, 0.99)})
    return table


def print_per_second(table):
    print("per second produced: p99 ms record->probe arrival / record->simulator receipt / probe arrival->receipt")
    print(" ".join(f"{r['second']}:{r['probe_p99']}/{r['receipt_p99']}/{r['after_arrival_p99']}" for r in table))
    slow = [r for r in table if r["receipt_p99"] > 50]
    both = [r for r in slow if r["probe_p99"] > 50]
    print(f"seconds with receipt p99 over 50 ms: {len(slow)} of {len(table)}; of them the probe's p99 was over 50 ms "
          f"too in {len(both)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--mode", choices=["backlog", "rate"], default="backlog")
    parser.add_argument("--events", type=int, default=1_000_000, help="backlog mode: events to preload")
    parser.add_argument("--rate", type=int, default=20_000, help="rate mode: events offered per second")
    parser.add_argument("--seconds", type=float, default=60, help="rate mode: for how long")
    parser.add_argument("--payload", type=int, default=300, help="payload bytes")
    parser.add_argument("--max-in-flight", type=int, default=None)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--http2", action="store_true",
                        help="deliver over the simulator's HTTP/2 API (token authentication) instead of the binary gateway")
    parser.add_argument("--response-delay-ms", type=int, default=0,
                        help="with --http2: the API answers each request this late (a WAN-like round trip)")
    parser.add_argument("--broker", choices=["noida", "mock"], default="noida",
                        help="noida-db (default), or librdkafka's mock cluster in a process of its own (it keeps "
                             "5 MiB per partition, so its memory stays flat over a soak; a backlog there is spread "
                             "over as many partitions as it needs)")
    parser.add_argument("--partitions", type=int, default=None,
                        help="the input topic's partitions (6; a backlog on the mock cluster: as many as keep it)")
    parser.add_argument("--idle-seconds", type=float, default=10, help="rate mode: idle time measured before")
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, record file)")
    parser.add_argument("--uuid-ids", action="store_true", help="event ids are UUIDs (36 characters), not e1, e2, ...")
    parser.add_argument("--probe", action="store_true",
                        help="rate mode: a plain consumer reads the input beside the worker; latency is then shown per "
                             "second for both, to tell the broker's and the machine's pauses from the worker's")
    parser.add_argument("--consumer-property", action="append", default=[], metavar="KEY=VALUE",
                        help="a librdkafka consumer property for the worker (repeatable)")
    parser.add_argument("--idle-fetch-pace-ms", type=int, default=None,
                        help="the worker's kafka.idle_fetch_pace_ms (default: the worker's own; 0 turns idle pacing off)")
    args = parser.parse_args()
    if args.uuid_ids:
        h.event_id = h.uuid_event_id

    partitions = args.partitions or 6
    if args.broker == "mock" and args.mode == "backlog":
        largest = len(h.event(args.events, args.payload, int(time.time() * 1000))) + len(h.record_key(args.events))
        needed = mock_partitions_for(args.events, largest)
        if args.partitions is None:
            partitions = needed
        elif args.partitions < needed:
            parser.error(f"--broker mock keeps 5 MiB per partition: {args.events} events need --partitions {needed} "
                         "or more")
    workdir = tempfile.mkdtemp(prefix="bench-e2e-")
    if args.broker == "mock":
        broker = h.MockBroker(os.path.join(os.path.dirname(args.binary), "kafka-test-helper"), partitions)
    else:
        broker = h.Broker(workdir)
    simulator = worker = probe = None
    results = {"mode": args.mode, "broker": args.broker, "partitions": partitions, "payload_bytes": args.payload,
               "connections": args.connections,
               "machine": f"{os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d")}
    try:
        servers = broker.start()
        broker.create_topics(partitions)
        # The mock cluster answers a fetch with one of the producer's batches a partition: a backlog meant for it
        # is produced as a loading job would, in full batches (up to 1 MB each), not one small batch a millisecond.
        producer = h.EventProducer(servers, linger_ms=1000 if args.broker == "mock" and args.mode == "backlog" else 1)
        if args.mode == "backlog":
            total = args.events
            began = time.monotonic()
            producer.backlog(total, args.payload)
            results["produce_per_s"] = round(total / (time.monotonic() - began))
            print(f"produced {total} events ({args.payload}-byte payloads, {partitions} partitions) at "
                  f"{results['produce_per_s']}/s", flush=True)
            children_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
            children_cpu = children_cpu.ru_utime + children_cpu.ru_stime
            ceiling, kcat_rss, kcat_cpu = kcat_ceiling(servers, total)
            kcat_cpu -= children_cpu  # the shell and kcat only (wc is negligible)
            results["kcat_per_s"], results["kcat_peak_rss_mb"] = round(ceiling), round(kcat_rss / 2**20)
            results["kcat_cpu_s_per_million"] = round(kcat_cpu / total * 1e6, 2)
            print(f"kcat ceiling: {ceiling:,.0f} records/s (peak RSS {kcat_rss / 2**20:.0f} MiB, "
                  f"{results['kcat_cpu_s_per_million']} CPU s per million)", flush=True)
        else:
            total = int(args.rate * args.seconds)

        max_in_flight = args.max_in_flight or (300_000 if args.mode == "backlog" else 100_000)
        results["max_in_flight"] = max_in_flight
        results["events"] = total
        api_port = h.free_port() if args.http2 else None
        delay = ["--response-delay-ms", str(args.response_delay_ms)] if args.http2 and args.response_delay_ms else []
        simulator = h.Simulator(args.binary, workdir, delay, api_port=api_port)
        http_port = h.free_port()
        config = h.worker_config(workdir, servers, simulator.gateway, simulator.feedback, http_port,
                                 max_in_flight=max_in_flight, connections=args.connections, api_port=api_port,
                                 consumer_properties=dict(p.split("=", 1) for p in args.consumer_property),
                                 idle_fetch_pace_ms=args.idle_fetch_pace_ms)
        results["transport"] = "http2" if args.http2 else "binary"
        worker = h.Worker(args.binary, config, workdir, http_port)
        poller = h.Poller(worker, 10.0)
        poller.start()
        idle_cpu_per_s = start_up_cpu = None
        if args.mode == "rate":
            wait_ready(worker)
            # What the worker spends with nothing to do: on noida-db, whose fetch answers come back at once even
            # when empty, librdkafka's fetch loop alone keeps a core half busy (kcat does the same). It is part
            # of the CPU per million below; under load the fetches return records and spin less.
            start_up_cpu = worker.proc()[0]
            time.sleep(args.idle_seconds)
            idle_cpu_per_s = (worker.proc()[0] - start_up_cpu) / args.idle_seconds
            print(f"worker start-up: {start_up_cpu:.2f} CPU s to ready; idle: {idle_cpu_per_s * 1000:.1f} CPU ms per s "
                  "with no events (both in the CPU per million below)", flush=True)
            if args.probe:
                probe = h.LatencyProbe(servers, workdir)
            began = time.time()
            producer.at_rate(args.rate, args.seconds, args.payload)
            print(f"offered {total} events at {args.rate}/s for {args.seconds:.0f} s "
                  f"(took {time.time() - began:.1f} s)", flush=True)
        cpu, peak, by_thread, usage, tail = wait_outcomes(worker, total, timeout=max(600, args.seconds * 2))
        poller.stopped.set()
        # How often the pipeline filled: a hold stops polling; a pause (a hold that did not drain in time) drops
        # librdkafka's prefetched records, fetched again on resume.
        final_metrics = worker.metrics()
        fetch_throttle = {"holds": int(final_metrics.get("pushworker_fetch_holds_total", 0)),
                          "pauses": int(final_metrics.get("pushworker_fetch_pauses_total", 0))}
        arrivals = probe.stop() if probe else None
        worker_started = worker.started
        status = worker.terminate()
        summary = simulator.stop()
        simulator = None

        reader = h.RecordReader(os.path.join(workdir, "record.jsonl"), keep_latency=True)
        reader.update()
        latencies = sorted(reader.latencies)
        delivered = len(reader.seen)
        elapsed = reader.last_ms / 1000 - worker_started
        results.update({
            "delivered": delivered, "missing": total - delivered, "duplicates": reader.duplicates,
            "notifications_per_s": round(total / elapsed),
            "notifications_per_s_first_to_last_receipt": round(total / max(0.001, (reader.last_ms - reader.first_ms) / 1000)),
            "latency_ms": latency_summary(latencies),
            "worker_peak_rss_mb": round(peak / 2**20, 1),
            "worker_cpu_s": round(cpu, 2),
            "worker_cpu_s_per_million": round(cpu / total * 1e6, 2),
            # librdkafka's threads (fetching, parsing the broker's answers) apart from the worker's own.
            "worker_cpu_s_per_million_by_thread": {k: round(v / total * 1e6, 2) for k, v in by_thread.items()},
            # User and system CPU seconds and minor page faults, per million.
            "worker_usage_per_million": {k: round(v / total * 1e6, 2) for k, v in usage.items()},
            "fetch_throttle": fetch_throttle,
            # After every notification was written: the acceptance window's wait (see wait_outcomes).
            "tail_after_last_send": ({k: round(v, 2) for k, v in tail.items()} if tail else None),
            # The CPU per million without librdkafka's threads in that tail (their idle fetching).
            "worker_cpu_s_per_million_without_idle_tail": (
                cpu_per_million_without_idle_tail(cpu, tail, total) if tail else None),
            "worker_idle_cpu_per_s": round(idle_cpu_per_s, 4) if idle_cpu_per_s is not None else None,
            "worker_start_up_cpu_s": start_up_cpu,
            "rss_series_mb": [(round(t), round(rss / 2**20, 1)) for t, rss in poller.samples],
            "worker_exit": status,
            "simulator": summary,
        })
        if args.mode == "backlog":
            results["ratio_to_kcat"] = round(results["notifications_per_s"] / results["kcat_per_s"], 3)

        print(f"delivered {delivered} of {total} (missing {total - delivered}, duplicates {reader.duplicates}); "
              f"worker exit {status}")
        print(f"end to end: {results['notifications_per_s']:,} notifications/s from the worker's start to the last "
              f"receipt ({results['notifications_per_s_first_to_last_receipt']:,}/s first to last receipt)")
        if args.mode == "backlog":
            print(f"ratio to the kcat ceiling: {results['ratio_to_kcat']}")
        lat = results["latency_ms"]
        print(f"latency, record timestamp to simulator receipt: p50 {lat['p50']} ms, p99 {lat['p99']} ms, "
              f"p99.9 {lat['p999']} ms, max {lat['max']} ms")
        split = results["worker_cpu_s_per_million_by_thread"]
        print(f"worker: peak RSS {results['worker_peak_rss_mb']} MiB, CPU {cpu:.1f} s = "
              f"{results['worker_cpu_s_per_million']} s per million notifications "
              f"(librdkafka's threads {split['librdkafka']}, the worker's own {split['worker']})")
        if tail:
            print(f"after the last send ({tail['seconds']:.2f} s, the acceptance window): librdkafka's threads "
                  f"{tail['librdkafka']:.2f} CPU s (fetching empty answers), the worker's own {tail['worker']:.2f}; "
                  f"without librdkafka's in that wait: {results['worker_cpu_s_per_million_without_idle_tail']} s "
                  "per million")
        usage = results["worker_usage_per_million"]
        print(f"worker, per million: user {usage['user']} s, system {usage['system']} s (librdkafka's threads "
              f"{usage['librdkafka_system']} s); page faults: librdkafka's threads {usage['librdkafka_page_faults']:,.0f}, "
              f"the worker's own {usage['worker_page_faults']:,.0f}")
        print(f"fetching held {fetch_throttle['holds']} times, paused {fetch_throttle['pauses']} times "
              "(the pipeline full at max_in_flight)")
        if results["rss_series_mb"]:
            print("worker RSS every 10 s (MiB): " + " ".join(str(mb) for _, mb in results["rss_series_mb"]))
            settled = [mb for t, mb in results["rss_series_mb"] if t > 60]
            if len(settled) >= 12:
                first, last = settled[:6], settled[-6:]
                results["rss_after_warmup_mb"] = {"min": min(settled), "max": max(settled),
                                                  "first_minute_mean": round(sum(first) / 6, 1),
                                                  "last_minute_mean": round(sum(last) / 6, 1)}
                w = results["rss_after_warmup_mb"]
                print(f"RSS after the first minute: {w['min']}-{w['max']} MiB; mean of its first minute "
                      f"{w['first_minute_mean']} MiB, of its last minute {w['last_minute_mean']} MiB")
        if arrivals is not None:
            results["per_second"] = per_second(reader.receipts, arrivals)
            probe_latencies = sorted(arrived - ts for ts, arrived in arrivals.values())
            after_arrival = sorted(reader.receipts[n][1] - arrived for n, (_, arrived) in arrivals.items()
                                   if n in reader.receipts)
            results["probe_latency_ms"] = latency_summary(probe_latencies)
            results["after_probe_arrival_ms"] = latency_summary(after_arrival)
            p, a = results["probe_latency_ms"], results["after_probe_arrival_ms"]
            print(f"latency, record timestamp to a plain consumer beside the worker: p50 {p['p50']} ms, "
                  f"p99 {p['p99']} ms, max {p['max']} ms ({len(arrivals)} events); from its arrival there to the "
                  f"simulator's receipt: p50 {a['p50']} ms, p99 {a['p99']} ms, max {a['max']} ms")
            print_per_second(results["per_second"])
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
        return 0 if delivered == total and status == 0 else 1
    finally:
        if worker and worker.process.poll() is None:
            worker.kill()
        if probe and probe.process.poll() is None:
            probe.process.kill()
        if simulator:
            simulator.process.kill()
        broker.stop()
        if args.keep:
            print(f"work folder kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
