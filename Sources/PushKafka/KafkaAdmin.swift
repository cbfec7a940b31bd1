import Crdkafka

/// Topic administration for tests, scripts and the demo: creates topics with a given partition count.
public enum KafkaAdmin {
    /// Creates `topics` (name, partitions), ignoring those that exist already.
    public static func createTopics(
        bootstrapServers: String, _ topics: [(String, Int32)], timeoutMilliseconds: Int32 = 15_000
    ) throws(KafkaError) {
        let configuration = try KafkaConfigurationHandle(["bootstrap.servers": bootstrapServers, "log_level": "3"])
        let client = try configuration.makeClient(RD_KAFKA_PRODUCER)
        defer { rd_kafka_destroy(client) }
        let queue = rd_kafka_queue_new(client)
        defer { rd_kafka_queue_destroy(queue) }
        var error = [CChar](repeating: 0, count: 256)
        var requests: [OpaquePointer?] = topics.map { name, partitions in
            rd_kafka_NewTopic_new(name, partitions, 1, &error, error.count)
        }
        defer { for r in requests { rd_kafka_NewTopic_destroy(r) } }
        let options = rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_CREATETOPICS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        rd_kafka_AdminOptions_set_operation_timeout(options, timeoutMilliseconds, &error, error.count)
        rd_kafka_CreateTopics(client, &requests, requests.count, options, queue)
        guard let event = rd_kafka_queue_poll(queue, timeoutMilliseconds + 5000) else {
            throw KafkaError("creating topics timed out")
        }
        defer { rd_kafka_event_destroy(event) }
        if rd_kafka_event_error(event) != RD_KAFKA_RESP_ERR_NO_ERROR {
            throw KafkaError(rd_kafka_event_error(event), "cannot create topics")
        }
        guard let result = rd_kafka_event_CreateTopics_result(event) else { throw KafkaError("no CreateTopics result") }
        var count = 0
        guard let results = rd_kafka_CreateTopics_result_topics(result, &count) else { return }
        for i in 0..<count {
            let code = rd_kafka_topic_result_error(results[i])
            if code != RD_KAFKA_RESP_ERR_NO_ERROR && code != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS {
                throw KafkaError(code, "cannot create topic \(String(cString: rd_kafka_topic_result_name(results[i])))")
            }
        }
    }
}
