import Logging
import PushKafka
import ServiceLifecycle
import UnixSignals

/// The worker's pieces as ServiceLifecycle services, in the order a `ServiceGroup` starts them; graceful shutdown
/// runs through them in reverse: the feedback poller stops, the pipeline finishes what is in flight (fetching
/// paused), the consumer commits the settled offsets and leaves the group, the HTTP endpoints close, the producer
/// flushes, and the signal escalation ends last.
///
/// Each is named for the group's log lines and errors (`sl-service`). Without a name ServiceLifecycle would describe
/// the service by reflection, every stored property included: the suppression reader's Kafka properties (a SASL
/// password among them) in a debug line, and a few milliseconds of the start spent describing them.
extension Worker {
    public var services: [ServiceGroupConfiguration.ServiceConfiguration] {
        [
            .init(service: SecondSignal(logger: logger), successTerminationBehavior: .ignore, failureTerminationBehavior: .cancelGroup, serviceName: "signals"),
            .init(service: ProducerService(producer: producer), successTerminationBehavior: .gracefullyShutdownGroup, serviceName: "producer"),
            .init(service: HTTPService(endpoints: http, listen: configuration.httpListen, logger: logger), successTerminationBehavior: .gracefullyShutdownGroup, serviceName: "http"),
        ] + (suppression.map { [.init(service: $0.service, successTerminationBehavior: .gracefullyShutdownGroup, serviceName: "suppression")] } ?? []) + [
            .init(service: ConsumerService(consumer: consumer, suppression: suppression?.list), successTerminationBehavior: .gracefullyShutdownGroup, serviceName: "consumer"),
            .init(service: PipelineService(worker: self), successTerminationBehavior: .gracefullyShutdownGroup, serviceName: "pipeline"),
            .init(service: FeedbackService(poller: feedback), successTerminationBehavior: .ignore, serviceName: "feedback"),
        ]
    }
}

/// SIGTERM or SIGINT starts the group's graceful shutdown; a second one cancels the group (every wait is cut
/// short; only settled offsets are committed, so at-least-once holds).
struct SecondSignal: Service {
    let logger: Logger

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                var seen = 0
                for await _ in signals {
                    seen += 1
                    if seen >= 2 {
                        logger.warning("second signal: stopping now; what has no outcome stays uncommitted")
                        throw SecondSignalReceived()
                    }
                }
            }
            group.addTask {
                // This service's own turn in the graceful shutdown comes last: then it is no longer needed.
                try await gracefulShutdown()
            }
            try await group.next()
            group.cancelAll()
        }
    }
}

/// What the group throws when a second SIGTERM or SIGINT cancelled it.
public struct SecondSignalReceived: Error, CustomStringConvertible {
    public var description: String { "a second signal during shutdown" }
}

/// The producer's thread, until graceful shutdown (then it flushes what is queued) or cancellation.
struct ProducerService: Service {
    let producer: KafkaProducer

    func run() async throws {
        await withGracefulShutdownHandler {
            await producer.run(flushTimeout: .seconds(10))
        } onGracefulShutdown: {
            producer.stop()
        }
    }
}

/// The consumer's poll thread, until graceful shutdown or cancellation; then it stores and commits the settled
/// offsets and leaves the group. With token suppression it joins the group only once the suppression topic is read
/// (SPEC section 10: no event is checked against a table still loading).
struct ConsumerService: Service {
    let consumer: KafkaConsumer
    let suppression: SuppressionList?

    func run() async throws {
        if let suppression {
            await cancelWhenGracefulShutdown { await suppression.waitUntilLoaded() }
            guard suppression.isLoaded else { return }
        }
        await withGracefulShutdownHandler {
            await consumer.run()
        } onGracefulShutdown: {
            consumer.stop()
        }
    }
}

/// `/metrics`, `/healthz`, `/readyz`, listening until graceful shutdown.
struct HTTPService: Service {
    let endpoints: HTTPEndpoints
    let listen: String
    let logger: Logger

    func run() async throws {
        let (host, port) = WorkerConfiguration.split(listen)
        let bound: Int
        do {
            bound = try await endpoints.start(host: host, port: port)
        } catch {
            throw HTTPListenError(listen: listen, reason: "\(error)")
        }
        logger.info("http endpoints", metadata: ["listen": "\(host):\(bound)"])
        try? await gracefulShutdown()
        await endpoints.stop()
    }
}

/// The HTTP endpoints could not listen where `http.listen` says (the port is taken, the address is not local):
/// the worker stops at start, naming the key.
struct HTTPListenError: Error, CustomStringConvertible {
    let listen: String
    let reason: String
    var description: String { "http.listen: cannot listen on \(listen): \(reason)" }
}

/// The feedback poller, cancelled at graceful shutdown (a poll in progress ends; its spool file stays for the next
/// start).
struct FeedbackService: Service {
    let poller: FeedbackPoller

    func run() async throws {
        await cancelWhenGracefulShutdown { await poller.run() }
    }
}

/// The delivery engine's connections, until graceful shutdown: then fetching pauses, what is in flight gets its
/// outcome within the deadline, its output events are acknowledged, and the engine stops.
struct PipelineService: Service {
    let worker: Worker

    func run() async throws {
        worker.pipeline.start()
        try? await gracefulShutdown()
        await worker.shutDown()
    }
}
