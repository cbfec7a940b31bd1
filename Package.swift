// swift-tools-version: 6.1
// pushworker: delivers push notifications from Kafka to Apple's binary provider interface.
import PackageDescription

import class Foundation.FileManager
import class Foundation.ProcessInfo

let strict: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "pushworker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "pushworker", targets: ["pushworker"]),
        .library(name: "PushCore", targets: ["PushCore"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.1"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
    ],
    targets: [
        // Protocol core: event validation, payload bytes, binary frames, decoders. No I/O.
        .target(
            name: "PushCore",
            dependencies: [
                "CPushScan", .product(name: "NIOCore", package: "swift-nio"), .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        // The JSON reader's and the device token's sixteen-byte steps (SSE2), inline in its header. No I/O.
        .target(name: "CPushScan"),
        // Collections of our own for the long queues of held notifications (chunked: no doubling, memory given back).
        .target(name: "PushCollections", swiftSettings: strict),
        // librdkafka (Debian: librdkafka-dev), with the mock cluster header.
        .systemLibrary(
            name: "Crdkafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        // Everything between Kafka and the pipeline: consumer group, producer, offsets after outcomes, mock cluster.
        .target(
            name: "PushKafka",
            dependencies: [
                "Crdkafka",
                "PushCollections",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The gateway simulator users run with `pushworker simulate`: binary gateway, feedback service and HTTP/2 API.
        .target(
            name: "PushSimulator",
            dependencies: [
                "PushCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // The delivery engine: connection state machine, TLS connection pools, backoff, feedback client.
        .target(
            name: "PushGateway",
            dependencies: [
                "PushCore",
                "PushCollections",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        // The worker: the pipeline that joins Kafka, validation and delivery.
        .target(
            name: "PushWorker",
            dependencies: [
                "PushCore",
                "PushGateway",
                "PushKafka",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // `pushworker demo`: the worker, the simulator in-process and a throwaway PKI, on the mock cluster.
        .target(
            name: "PushDemo",
            dependencies: [
                "PushCore",
                "PushGateway",
                "PushKafka",
                "PushSimulator",
                "PushWorker",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),
        // The subcommands of the `pushworker` executable; a library so tests can drive them in-process.
        .target(
            name: "PushWorkerCLI",
            dependencies: [
                "PushCore",
                "PushGateway",
                "PushSimulator",
                "PushWorker",
                "PushDemo",
                "PushKafka",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "pushworker",
            dependencies: ["PushWorkerCLI"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushCoreTests",
            dependencies: [
                "PushCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: strict
        ),
        // What several test targets share (the test PKI).
        .target(
            name: "PushTestSupport",
            dependencies: ["PushCore", "PushKafka", .product(name: "Logging", package: "swift-log")],
            path: "Tests/PushTestSupport",
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushGatewayTests",
            dependencies: [
                "PushTestSupport",
                "PushGateway",
                "PushSimulator",
                "PushCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                // An HTTP/2 server and HPACK written independently of ours, to test the client against.
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushKafkaTests",
            dependencies: ["PushKafka", "PushCore", "PushTestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushCollectionsTests",
            dependencies: ["PushCollections"],
            swiftSettings: strict
        ),
        // A helper process for the Kafka integration tests: the mock cluster as a broker process, or a group member
        // that a test can kill.
        .executableTarget(
            name: "kafka-test-helper",
            dependencies: ["PushKafka"],
            path: "Tests/KafkaTestHelper",
            swiftSettings: strict
        ),
        // Against a separately started broker process (scripts/kafka-broker), with real consumer groups.
        .testTarget(
            name: "PushKafkaIntegrationTests",
            dependencies: ["PushKafka", "PushTestSupport"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushSimulatorTests",
            dependencies: [
                "PushTestSupport",
                "PushSimulator",
                "PushCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushWorkerTests",
            dependencies: ["PushWorker", "PushDemo", "PushTestSupport", "PushKafka", "PushCore", "PushGateway", "PushSimulator",
                           .product(name: "Logging", package: "swift-log"),
                           .product(name: "NIOEmbedded", package: "swift-nio"),
                           .product(name: "Prometheus", package: "swift-prometheus"),
                           .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")],
            swiftSettings: strict
        ),
        // The files under deploy/: they parse, the Kubernetes objects are complete, the shipped configurations
        // pass `pushworker check-config`.
        .testTarget(
            name: "DeployTests",
            dependencies: ["PushTestSupport", .product(name: "Yams", package: "Yams")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "PushWorkerCLITests",
            dependencies: ["PushWorkerCLI", "PushCore", "PushTestSupport"],
            swiftSettings: strict
        ),
    ]
)

// Benchmarks (ordo-one/benchmark) are declared only when asked for, so that the product's build and tests never
// compile the benchmark harness: `scripts/bench` sets PUSHWORKER_BENCHMARKS=1 and builds in .build-bench.
if ProcessInfo.processInfo.environment["PUSHWORKER_BENCHMARKS"] == "1" {
    package.dependencies.append(
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.1", traits: ["MallocInterposer"]))
    package.targets.append(
        .target(
            name: "BenchmarkSamples",
            path: "Benchmarks/BenchmarkSamples",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ))
    package.targets.append(
        .executableTarget(
            name: "DecodeLoop",
            dependencies: ["PushCore", "BenchmarkSamples"],
            path: "Benchmarks/DecodeLoop",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ))
    package.targets.append(
        .executableTarget(
            name: "CoreBenchmarks",
            dependencies: [
                "PushCore",
                "BenchmarkSamples",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/CoreBenchmarks",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ))
    package.targets.append(
        .executableTarget(
            name: "KafkaConsumeBenchmark",
            dependencies: ["PushKafka"],
            path: "Benchmarks/KafkaConsumeBenchmark",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ))
    package.targets.append(
        .executableTarget(
            name: "SimulatorBenchmarks",
            dependencies: [
                "PushCore",
                "PushSimulator",
                "PushGateway",
                .product(name: "Benchmark", package: "benchmark"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Benchmarks/SimulatorBenchmarks",
            swiftSettings: [.swiftLanguageMode(.v6)],
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        ))
}

// Fuzz targets (libFuzzer) are declared only when asked for: `scripts/fuzz/run` sets PUSHWORKER_FUZZ=1 and builds
// them in .build-fuzz with `-sanitize=fuzzer,address` for every Swift module, so that PushCore is instrumented too.
// Each target hands its body to `runFuzzer` (FuzzSupport), which starts libFuzzer's driver (CFuzzerDriver).
if ProcessInfo.processInfo.environment["PUSHWORKER_FUZZ"] == "1" {
    package.targets.append(.target(name: "CFuzzerDriver", path: "Fuzz/CFuzzerDriver"))
    package.targets.append(.target(name: "FuzzSupport", dependencies: ["CFuzzerDriver"], path: "Fuzz/FuzzSupport",
                                   swiftSettings: [.swiftLanguageMode(.v6)]))
    // A target is a folder of Fuzz/ with a main.swift (scripts/fuzz/run finds them the same way).
    let fuzz = "\(String(#filePath).split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/"))/Fuzz"
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: fuzz)) ?? [])
        .filter { FileManager.default.fileExists(atPath: "\(fuzz)/\($0)/main.swift") }.sorted()
    for name in names {
        package.targets.append(
            .executableTarget(
                name: name,
                dependencies: ["PushCore", "FuzzSupport", .product(name: "NIOCore", package: "swift-nio")]
                    + (["FuzzEventDecoder", "FuzzAPIRequest", "FuzzHTTP2Server"].contains(name) ? ["PushSimulator"] : [])
                    + (name == "FuzzHTTP2Client" ? ["PushGateway"] : []),
                path: "Fuzz/\(name)",
                swiftSettings: [.swiftLanguageMode(.v6)]
            ))
    }
}
