"""The fault matrix: the end-to-end flow under one fault at a time, over the binary gateway and over the HTTP/2 API.
Run through scripts/fault-matrix.

For every scenario a fresh broker, simulator and worker run; events are offered at a fixed rate so that the
faults land while work is in flight. At the end it counts, per scenario: delivered (distinct events the simulator
accepted), missing (events with neither a delivery nor a delivery error), duplicates (extra deliveries), and
delivery error events by reason, and compares them with what the fault must produce. Missing must be 0 everywhere.
It also prints the notifications the workers wrote to the gateway per event (resends included): how much a fault
costs on the wire.

For diagnosis: FAULT_MATRIX_KEEP=1 keeps each scenario's directory (worker.log, record.jsonl, the broker's data),
FAULT_MATRIX_LOG_LEVEL sets the worker's log level, FAULT_MATRIX_KAFKA_DEBUG sets librdkafka's `debug` contexts
(e.g. "cgrp,fetch") for the worker's consumer.
"""

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, TopicPartition

import harness as h


class Scenario:
    def __init__(self, name, faults=(), invalid_share=0, refuse_s=0, broker_restart=False, kills=0, sigterm=False,
                 preload=False, max_writes=None, join=False, protocol=None, events=None, rate=None, acceptance_ms=None,
                 payload=300, http2=False, unregistered_share=0, no_duplicates=False, expect_answer=None,
                 invalid_pool=None, connections=2, chatty=None, reconnect=(20, 1000, 5), rollout=0,
                 token_renewals=False):
        self.name, self.faults, self.invalid_share, self.preload = name, list(faults), invalid_share, preload
        # The app's format (`protocol` in its configuration), and overrides of the run's size and pace.
        self.protocol, self.events, self.rate, self.acceptance_ms, self.payload = (
            protocol, events, rate, acceptance_ms, payload)
        # Writes to the gateway per event at most (resends included): no resend storm under this fault.
        self.max_writes = max_writes
        # A second worker joins the group midway (scaling up under a backlog: a rebalance while the first is full).
        self.join = join
        self.refuse_s, self.broker_restart, self.kills, self.sigterm = refuse_s, broker_restart, kills, sigterm
        # The app goes over the HTTP/2 API (token authentication); faults are then the API's.
        self.http2 = http2
        # Every Nth event goes to a token the API answers 410 Unregistered: a delivery error and a feedback event each.
        self.unregistered_share = unregistered_share
        # Nothing the gateway accepted may arrive twice (faults whose resends the worker knows to be unprocessed).
        self.no_duplicates = no_duplicates
        # An answer of the API's that must have been given at least once (the fault did happen).
        self.expect_answer = expect_answer
        # The worker's provider-token renewals (its metric) must be the tokens the API took into use less the first:
        # one renewal per expiry, each seen by the API (one worker process only).
        self.token_renewals = token_renewals
        # With token suppression (SPEC section 10): the invalid-token events go to this many distinct tokens, each
        # again and again; after its first rejection none may reach the gateway.
        self.invalid_pool = invalid_pool
        # Connections to the gateway (the app's `connections`).
        self.connections = connections
        # (tokens, events): the first `events` events go to this many device tokens in turn, each again and again
        # (chatty devices; with the API's `--token-rate`, the worker meets 429 TooManyRequests for them).
        self.chatty = chatty
        # The worker's `delivery.reconnect` (initial ms, max ms, reset after s): also the bounds of its retry delays.
        self.reconnect = reconnect
        # A rollout: this many workers share the group from the start; midway all get SIGTERM at once, and as many
        # new ones take over.
        self.rollout = rollout


SCENARIOS = [
    Scenario("status 10 every 100", faults=["--shutdown-every", "100"], max_writes=8),
    Scenario("abrupt close every 1,000", faults=["--close-every", "1000"]),
    Scenario("5% invalid tokens", invalid_share=20, max_writes=8),
    # One connection: on two, two events to one token can be written on both before the first answer comes (each
    # rightly: the token is not suppressed yet), and the gateway then rejects that token twice (51 of 50 once in CI).
    # On one, a later event to the token is behind the rejected one, discarded, and suppressed before it is resent.
    Scenario("5% to 50 invalid tokens, suppressed", invalid_share=20, invalid_pool=50, connections=1),
    # The simple format has no error responses: the gateway closes the connection at a bad notification and the
    # worker finds it by halving the suspects (each probe waits an acceptance window, hence the shorter window and
    # the smaller run). Payloads fit the legacy formats' 256 bytes.
    Scenario("simple format, 1% invalid tokens", invalid_share=100, protocol="simple", events=5000, rate=1000,
             acceptance_ms=250, payload=200),
    Scenario("processing errors 1%", faults=["--processing-error-rate", "0.01", "--seed", "7"], max_writes=8),
    Scenario("gateway refusing connections for 10 s", refuse_s=10),
    # The events are in the broker (and in its snapshot) before the restart: noida-db snapshots every 1-2 s, and a
    # restart while events are still being produced loses acknowledged records and reuses their offsets, which
    # makes any consumer past them skip what is written there next (seen in 2 of 6 runs). That is the broker losing
    # data, not something a consumer can see; this scenario checks the worker across the restart. Paced by a small
    # max_in_flight, the worker is paused when the broker goes away: the restart lands as a rebalance under a full
    # pipeline (this found the consumer staying paused after it, in about half the runs).
    Scenario("broker restarted midway", broker_restart=True, preload=True),
    Scenario("a second worker joins midway", preload=True, join=True),
    Scenario("worker SIGKILLed twice", kills=2),
    Scenario("SIGTERM midway", sigterm=True),
    # Members leaving together: the first to go starts a rebalance, and the others' final commits are refused for
    # their old generation unless they commit again in the new one (issue "one owner per record": 2 of 425 records
    # were left uncommitted, so delivered again, before). Graceful: nothing may arrive twice.
    Scenario("rollout: 3 workers SIGTERMed together", rollout=3, no_duplicates=True),
    # The HTTP/2 API (SPEC section 9), token authentication.
    Scenario("http2: GOAWAY every 500", http2=True, faults=["--goaway-every", "500"], no_duplicates=True),
    Scenario("http2: 503 at 1%", http2=True, faults=["--rate-503", "0.01", "--seed", "7"], no_duplicates=True),
    Scenario("http2: 429 at 1%", http2=True, faults=["--rate-429", "0.01", "--seed", "7"], no_duplicates=True),
    # The first 1,000 events go to 20 devices, which the API accepts 10 a second each; preloaded, the worker may
    # read them all within a second (50 to each device at once): the 429s' retries wait their token's growing
    # delay and go at least a first step (200 ms) apart per device (no storm at a device), and all arrive once.
    # (Without that spacing, the retries that reached the 5 s maximum went together and met 429 together again:
    # 40 to 60 of 1,000 used up their five attempts once the worker read the backlog that fast.)
    Scenario("http2: 1,000 to 20 devices, 10/s each", http2=True, preload=True, chatty=(20, 1000),
             faults=["--token-rate", "10"], reconnect=(200, 5000, 5), no_duplicates=True,
             expect_answer="429 TooManyRequests"),
    Scenario("http2: 503 Shutdown every 1,000", http2=True, faults=["--shutdown-every", "1000"], no_duplicates=True),
    Scenario("http2: abrupt close every 1,000", http2=True, faults=["--close-every", "1000"]),
    Scenario("http2: 5% unregistered tokens", http2=True, unregistered_share=20, no_duplicates=True),
    # Tokens live 3 s on this API: the worker's expires during the run (403 ExpiredProviderToken) and is renewed.
    Scenario("http2: provider token expiring midway", http2=True, faults=["--token-lifetime-s", "3"], no_duplicates=True,
             expect_answer="403 ExpiredProviderToken", token_renewals=True),
    # The same, but no connection may switch tokens (Apple's renewal rule past the token's lifetime): each connection
    # refused the renewed token (429 TooManyProviderTokenUpdates) is replaced by one that starts with it, so the
    # answer is not drawn again request after request (a storm would exhaust the events' attempts).
    Scenario("http2: no connection may switch provider tokens", http2=True,
             faults=["--token-lifetime-s", "3", "--token-renewal-s", "3600"], no_duplicates=True, max_writes=2,
             expect_answer="429 TooManyProviderTokenUpdates", token_renewals=True),
    Scenario("http2: worker SIGKILLed twice", http2=True, kills=2),
]


class ErrorTopic:
    """Follows an output topic from the beginning (the delivery error topic unless told)."""

    def __init__(self, servers, topic=h.ERRORS):
        self.consumer = Consumer({"bootstrap.servers": servers, "group.id": "fault-matrix-reader", "log_level": 3,
                                  "enable.auto.commit": False, "receive.message.max.bytes": 1000000000})
        metadata = self.consumer.list_topics(topic, timeout=10)
        self.consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
        self.events = []

    def update(self):
        for message in self.consumer.consume(10000, 0.05):
            if not message.error():
                self.events.append(json.loads(message.value()))

    def numbers(self):
        return {int(e["event_id"][1:]) for e in self.events if (e.get("event_id") or "").startswith("e")}

    def close(self):
        self.consumer.close()


def run(scenario, binary, count, rate, timeout):
    count, rate = scenario.events or count, scenario.rate or rate
    workdir = tempfile.mkdtemp(prefix="fault-matrix-")
    broker = h.Broker(workdir)
    simulator = worker = second = errors = feedback = None
    members = []  # a rollout's other workers
    exits, notes = [], []
    try:
        servers = broker.start()
        broker.create_topics(6, suppression=bool(scenario.invalid_pool))
        faults = list(scenario.faults)
        invalid = set()
        token_for = None
        if scenario.invalid_share:
            invalid = {n for n in range(count) if n % scenario.invalid_share == 0}
            if scenario.invalid_pool:
                pool = [h.token(count + i) for i in range(scenario.invalid_pool)]
                token_for = lambda n: pool[n // scenario.invalid_share % len(pool)] if n in invalid else None
                bad_tokens = pool
            else:
                bad_tokens = [h.token(n) for n in sorted(invalid)]
            path = os.path.join(workdir, "invalid-tokens.txt")
            with open(path, "w") as f:
                f.writelines(t + "\n" for t in bad_tokens)
            faults += ["--invalid-tokens", path]
        if scenario.chatty:
            tokens, burst = scenario.chatty
            chatty_tokens = [h.token(count + i) for i in range(tokens)]
            token_for = lambda n: chatty_tokens[n % tokens] if n < burst else None
        unregistered = set()
        if scenario.unregistered_share:
            unregistered = {n for n in range(count) if n % scenario.unregistered_share == 0}
            path = os.path.join(workdir, "unregistered.txt")
            with open(path, "w") as f:
                f.writelines(f"{h.token(n)} 1790000000000\n" for n in sorted(unregistered))
            faults += ["--unregistered", path]
        gateway_port, feedback_port = h.free_port(), h.free_port()
        api_port = h.free_port() if scenario.http2 else None
        if not scenario.refuse_s:
            simulator = h.Simulator(binary, workdir, faults, gateway_port, feedback_port, api_port)
        producer = h.EventProducer(servers, token_for)
        produced = threading.Event()
        if scenario.preload:
            producer.backlog(count, scenario.payload)
            time.sleep(3)
            produced.set()
        http_port = h.free_port()
        # A preloaded run is paced by max_in_flight instead (at most that many per acceptance window), so that
        # the fault still lands midway.
        settings = dict(gateway_port=gateway_port, feedback_port=feedback_port, api_port=api_port, reconnect=scenario.reconnect,
                        protocol=scenario.protocol, acceptance_ms=scenario.acceptance_ms or 1000, connections=scenario.connections,
                        max_in_flight=rate // 2 if scenario.preload else 100000, suppression=bool(scenario.invalid_pool),
                        log_level=os.environ.get("FAULT_MATRIX_LOG_LEVEL", "warning"),
                        consumer_properties={"debug": os.environ["FAULT_MATRIX_KAFKA_DEBUG"]}
                        if os.environ.get("FAULT_MATRIX_KAFKA_DEBUG") else None)
        config = h.worker_config(workdir, servers, http_port=http_port, instance="fault-matrix-worker", **settings)
        worker = h.Worker(binary, config, workdir, http_port)

        def member(i):
            """The rollout's i-th other worker (1, 2, ...), in its own folder, with its own instance id."""
            member_dir = os.path.join(workdir, f"member-{i}")
            os.makedirs(member_dir, exist_ok=True)
            member_port = h.free_port()
            return h.Worker(binary, h.worker_config(member_dir, servers, http_port=member_port,
                                                    instance=f"fault-matrix-worker-{i + 1}", **settings),
                            member_dir, member_port)

        members = [member(i) for i in range(1, scenario.rollout)]
        rolled = False
        started = time.time()
        production = threading.Thread(target=lambda: (producer.at_rate(rate, count / rate, scenario.payload), produced.set()), daemon=True)
        if not scenario.preload:
            production.start()

        reader = h.RecordReader(os.path.join(workdir, "record.jsonl"))
        errors = ErrorTopic(servers)
        feedback = ErrorTopic(servers, h.FEEDBACK) if unregistered else None
        kills_done, restarted, terminated = 0, False, False
        writes = 0  # notifications written to the gateway, summed over the worker processes (read before each ends)
        deadline = started + timeout
        finished = False
        while time.time() < deadline:
            reader.update()
            errors.update()
            delivered = len(reader.seen)
            if scenario.refuse_s and simulator is None and time.time() - started >= scenario.refuse_s:
                simulator = h.Simulator(binary, workdir, faults, gateway_port, feedback_port, api_port)
                notes.append(f"simulator started after {time.time() - started:.1f} s with {delivered} delivered")
            if scenario.broker_restart and not restarted and delivered >= count // 2:
                broker.stop()
                broker.start()
                restarted = True
                notes.append(f"broker restarted at {delivered} delivered")
            if scenario.join and second is None and delivered >= count // 2:
                second_dir = os.path.join(workdir, "second")
                os.makedirs(second_dir)
                second_port = h.free_port()
                second = h.Worker(binary, h.worker_config(second_dir, servers, http_port=second_port,
                                                          instance="fault-matrix-worker-2", **settings),
                                  second_dir, second_port)
                notes.append(f"second worker started at {delivered} delivered")
            if kills_done < scenario.kills and delivered >= count * (kills_done + 1) // (scenario.kills + 1):
                writes += worker.writes()
                exits.append(("SIGKILL", worker.kill()))
                worker = h.Worker(binary, config, workdir, http_port)
                kills_done += 1
                notes.append(f"worker SIGKILLed at {delivered} delivered")
            if scenario.sigterm and not terminated and delivered >= count // 2:
                writes += worker.writes()
                code = worker.terminate()
                exits.append(("SIGTERM", code))
                worker = h.Worker(binary, config, workdir, http_port)
                terminated = True
                notes.append(f"worker SIGTERMed at {delivered} delivered (exit {code}), started again")
            if scenario.rollout and not rolled and delivered >= count // 2:
                everyone = [worker] + members
                writes += sum(w.writes() for w in everyone)
                for w in everyone:
                    w.process.send_signal(signal.SIGTERM)
                codes = [w.process.wait(60) for w in everyone]
                exits += [("SIGTERM (rollout)", code) for code in codes]
                worker = h.Worker(binary, config, workdir, http_port)
                members = [member(i) for i in range(1, scenario.rollout)]
                rolled = True
                notes.append(f"{len(everyone)} workers SIGTERMed together at {delivered} delivered (exits {codes}), "
                             f"{len(everyone)} started")
            if produced.is_set() and len(reader.seen | errors.numbers()) >= count:
                finished = True
                break
            time.sleep(0.2)
        elapsed = time.time() - started
        final_metrics = worker.metrics()
        writes += worker.writes(final_metrics)
        renewals = worker.total("pushworker_provider_token_renewals_total", metrics=final_metrics)
        exits.append(("final SIGTERM", worker.terminate()))
        if second:
            writes += second.writes()
            exits.append(("final SIGTERM (second worker)", second.terminate()))
        for w in members:
            writes += w.writes()
            exits.append(("final SIGTERM (rollout member)", w.terminate()))
        summary = simulator.stop() if simulator else {}
        simulator = None
        reader.update()
        errors.update()
        if feedback:
            # Feedback events are produced with their delivery errors; a moment for the last ones to be readable.
            for _ in range(50):
                feedback.update()
                if len(feedback.events) >= len(unregistered):
                    break
                time.sleep(0.1)
        if production.is_alive():
            production.join(5)

        error_numbers = errors.numbers()
        by_reason = {}
        for e in errors.events:
            by_reason[e["reason"]] = by_reason.get(e["reason"], 0) + 1
        delivered = reader.seen
        missing = count - len(delivered | error_numbers)
        # An event the broker acknowledged and then lost (noida-db snapshots every 1-2 s) never reached the
        # worker: count those apart, from what the input topic holds at the end.
        absent = set()
        if missing:
            absent = (set(range(count)) - h.numbers_in_input(servers)) - delivered - error_numbers
            notes.append(f"{len(absent)} of the {missing} missing are not in the input topic any more")
        expected_errors = {"invalid_token": len(invalid)} if invalid else {}
        if scenario.invalid_pool:
            # Each bad token is rejected by the gateway once; its later events are suppressed, not sent.
            rejected = (summary.get("error_responses") or {}).get("8", 0)
            checks_pool = {
                f"the gateway rejected each of the {scenario.invalid_pool} tokens once": rejected == scenario.invalid_pool,
            }
            expected_errors = {"invalid_token": scenario.invalid_pool, "token_suppressed": len(invalid) - scenario.invalid_pool}
            notes.append(f"status 8 answers: {rejected}; suppressed events: {by_reason.get('token_suppressed', 0)}")
        if unregistered:
            expected_errors["unregistered"] = len(unregistered)
        checks = {
            "missing is 0": missing == 0,
            "every event had its outcome within the time bound": finished,
            "delivered as expected": len(delivered) == count - len(invalid) - len(unregistered),
            "error events as expected": by_reason == expected_errors and error_numbers == invalid | unregistered,
            "no event both delivered and failed": not (delivered & error_numbers),
            "graceful exits are 0": all(code == 0 for kind, code in exits if kind != "SIGKILL"),
        }
        if scenario.invalid_pool:
            checks.update(checks_pool)
        if scenario.max_writes:
            checks[f"at most {scenario.max_writes} writes per event"] = writes <= scenario.max_writes * count
        if scenario.no_duplicates:
            checks["no duplicates"] = reader.duplicates == 0
        if scenario.expect_answer:
            given = (summary.get("api_answers") or {}).get(scenario.expect_answer, 0)
            checks[f"the API answered {scenario.expect_answer}"] = given > 0
            notes.append(f"{scenario.expect_answer}: {given}")
        if scenario.token_renewals:
            taken = summary.get("api_provider_tokens", 0)
            checks["token renewals (metric) are the tokens the API took less one, at least one"] = (
                renewals >= 1 and renewals == taken - 1)
            notes.append(f"provider token renewals: {renewals:.0f}; tokens the API took: {taken}")
        if unregistered:
            tokens = sorted(e["token"] for e in feedback.events)
            checks["one feedback event per unregistered token"] = tokens == sorted(h.token(n) for n in unregistered)
            notes.append(f"{len(feedback.events)} feedback events")
        return {
            "scenario": scenario.name, "events": count, "delivered": len(delivered), "missing": missing,
            "duplicates": reader.duplicates, "error_events": by_reason, "error_event_duplicates": len(errors.events) - len(error_numbers),
            "seconds": round(elapsed, 1), "writes": int(writes), "exits": exits, "notes": notes, "simulator": summary,
            "passed": all(checks.values()), "failed_checks": [k for k, ok in checks.items() if not ok],
        }
    finally:
        if errors:
            errors.close()
        if feedback:
            feedback.close()
        for process in [worker, second] + members:
            if process and process.process.poll() is None:
                process.kill()
        if simulator:
            simulator.process.kill()
        broker.stop()
        if os.environ.get("FAULT_MATRIX_KEEP"):
            print(f"      kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=4_000, help="events offered per second")
    parser.add_argument("--timeout", type=float, default=180, help="seconds per scenario at most")
    parser.add_argument("--only", help="run the scenarios whose name contains this")
    parser.add_argument("--json", help="write the results here as JSON")
    args = parser.parse_args()

    results = []
    for scenario in SCENARIOS:
        if args.only and args.only not in scenario.name:
            continue
        result = run(scenario, args.binary, args.events, args.rate, args.timeout)
        results.append(result)
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(result["error_events"].items())) or "none"
        status = "PASS" if result["passed"] else "FAIL"
        print(f"{status:<5} {result['scenario']:<40} delivered {result['delivered']:>6}  "
              f"missing {result['missing']}  duplicates {result['duplicates']:>5}  error events: {reasons}  "
              f"writes {result['writes'] / result['events']:.2f} per event  "
              f"({result['seconds']} s)", flush=True)
        for note in result["notes"]:
            print(f"      {note}")
        if result["failed_checks"]:
            print(f"      failed: {', '.join(result['failed_checks'])}; exits {result['exits']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0 if results and all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
