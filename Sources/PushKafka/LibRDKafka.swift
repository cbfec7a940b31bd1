import Crdkafka
import Logging
import Synchronization

/// The librdkafka the process linked, checked against the minimum this code is written for.
public enum LibRDKafka {
    /// Debian 12's librdkafka-dev; the mock cluster API and the consumer group behaviour are those of 2.0.2.
    public static let minimumVersion: Int32 = 0x0200_02FF
    public static var versionString: String { String(cString: rd_kafka_version_str()) }

    /// Throws when the linked librdkafka is older than ``minimumVersion``.
    public static func checkVersion() throws(KafkaError) {
        guard rd_kafka_version() >= minimumVersion else {
            throw KafkaError("librdkafka \(versionString) is older than 2.0.2, the minimum pushworker supports")
        }
    }
}

/// A librdkafka failure, with librdkafka's own words.
public struct KafkaError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public var code: Int32?

    public init(_ description: String, code: Int32? = nil) {
        self.description = description
        self.code = code
    }

    init(_ error: rd_kafka_resp_err_t, _ what: String) {
        self.init("\(what): \(String(cString: rd_kafka_err2str(error)))", code: error.rawValue)
    }
}

/// librdkafka's own log lines go through swift-log (levels mapped, the facility and client name as metadata), so
/// that a worker logging JSON writes nothing else to standard error. Every client this module makes logs here.
public enum KafkaLog {
    private static let override = Mutex<Logger?>(nil)

    /// Sends librdkafka's lines to `logger` instead of `Logger(label: "pushworker.kafka")` (made from the logging
    /// system's factory on each line; librdkafka logs rarely). Nil restores the default.
    public static func use(_ logger: Logger?) { override.withLock { $0 = logger } }

    /// A syslog level (0 emergency ... 7 debug) as a swift-log level.
    public static func level(syslog: Int32) -> Logger.Level {
        switch syslog {
        case ...2: .critical
        case 3: .error
        case 4: .warning
        case 5: .notice
        case 6: .info
        default: .debug
        }
    }

    static func log(client: String, level: Int32, facility: String, message: String) {
        let logger = override.withLock { $0 } ?? Logger(label: "pushworker.kafka")
        logger.log(level: Self.level(syslog: level), "\(message)", metadata: ["facility": "\(facility)", "client": "\(client)"])
    }

    static let callback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
        client, level, facility, message in
        KafkaLog.log(
            client: client.map { String(cString: rd_kafka_name($0)) } ?? "?", level: level,
            facility: facility.map { String(cString: $0) } ?? "", message: message.map { String(cString: $0) } ?? "")
    }
}

/// Builds an `rd_kafka_conf_t`. The configuration is owned here until `rd_kafka_new` takes it (which it does only
/// when it succeeds: on failure the caller still owns and destroys it).
final class KafkaConfigurationHandle {
    private(set) var pointer: OpaquePointer?

    init(_ properties: [String: String]) throws(KafkaError) {
        pointer = rd_kafka_conf_new()
        rd_kafka_conf_set_log_cb(pointer, KafkaLog.callback)
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            var error = [CChar](repeating: 0, count: 512)
            if rd_kafka_conf_set(pointer, key, value, &error, error.count) != RD_KAFKA_CONF_OK {
                let message = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                throw KafkaError("kafka property \(key): \(message)")
            }
        }
    }

    /// Creates the client; on success the configuration belongs to it.
    func makeClient(_ type: rd_kafka_type_t) throws(KafkaError) -> OpaquePointer {
        var error = [CChar](repeating: 0, count: 512)
        guard let client = rd_kafka_new(type, pointer, &error, error.count) else {
            let message = String(decoding: error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            throw KafkaError("cannot create the Kafka client: \(message)")
        }
        pointer = nil
        return client
    }

    deinit {
        if let pointer { rd_kafka_conf_destroy(pointer) }
    }
}

extension rd_kafka_topic_partition_list_t {
    /// The list's elements as (topic partition, offset).
    var entries: [(TopicPartition, Int64)] {
        (0..<Int(cnt)).map { i in
            let e = elems[i]
            return (TopicPartition(topic: String(cString: e.topic), partition: e.partition), e.offset)
        }
    }
}

/// A partition list built from Swift values; destroyed when this goes away.
final class PartitionList {
    let pointer: UnsafeMutablePointer<rd_kafka_topic_partition_list_t>

    init(_ entries: [(TopicPartition, Int64)]) {
        pointer = rd_kafka_topic_partition_list_new(Int32(max(1, entries.count)))
        for (tp, offset) in entries {
            let element = rd_kafka_topic_partition_list_add(pointer, tp.topic, tp.partition)
            element?.pointee.offset = offset
        }
    }

    deinit { rd_kafka_topic_partition_list_destroy(pointer) }
}
