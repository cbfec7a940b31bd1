import Crdkafka

/// Topic administration for tests, scripts and the demo: creates topics with a given partition count, and reads a
/// topic's settings.
public enum KafkaAdmin {
    /// Creates `topics` (name, partitions), each with `config` (e.g. `cleanup.policy: compact`), ignoring those that
    /// exist already.
    public static func createTopics(
        bootstrapServers: String, _ topics: [(String, Int32)], config: [String: String] = [:], timeoutMilliseconds: Int32 = 15_000
    ) throws(KafkaError) {
        let configuration = try KafkaConfigurationHandle(["bootstrap.servers": bootstrapServers, "log_level": "3"])
        let client = try configuration.makeClient(RD_KAFKA_PRODUCER)
        defer { rd_kafka_destroy(client) }
        let queue = rd_kafka_queue_new(client)
        defer { rd_kafka_queue_destroy(queue) }
        var error = [CChar](repeating: 0, count: 256)
        var requests: [OpaquePointer?] = topics.map { name, partitions in
            let request = rd_kafka_NewTopic_new(name, partitions, 1, &error, error.count)
            for (key, value) in config { rd_kafka_NewTopic_set_config(request, key, value) }
            return request
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

    /// A topic setting as the broker reports it (DescribeConfigs), on a thread of its own; nil when the broker does
    /// not tell within the timeout (librdkafka's mock cluster never does) or names no such setting.
    public static func topicSetting(
        _ name: String, of topic: String, properties: [String: String], timeoutMilliseconds: Int32 = 2_000
    ) async -> String? {
        try? await onOwnThread("kafka-admin") { () throws(KafkaError) in
            try describeTopicSetting(name, of: topic, properties: properties, timeoutMilliseconds: timeoutMilliseconds)
        }
    }

    private static func describeTopicSetting(
        _ name: String, of topic: String, properties: [String: String], timeoutMilliseconds: Int32
    ) throws(KafkaError) -> String? {
        let configuration = try KafkaConfigurationHandle(properties)
        let client = try configuration.makeClient(RD_KAFKA_PRODUCER)
        defer { rd_kafka_destroy(client) }
        let queue = rd_kafka_queue_new(client)
        defer { rd_kafka_queue_destroy(queue) }
        var error = [CChar](repeating: 0, count: 256)
        var resource: OpaquePointer? = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic)
        defer { rd_kafka_ConfigResource_destroy(resource) }
        let options = rd_kafka_AdminOptions_new(client, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS)
        defer { rd_kafka_AdminOptions_destroy(options) }
        rd_kafka_AdminOptions_set_request_timeout(options, timeoutMilliseconds, &error, error.count)
        rd_kafka_DescribeConfigs(client, &resource, 1, options, queue)
        guard let event = rd_kafka_queue_poll(queue, timeoutMilliseconds + 500) else { return nil }
        defer { rd_kafka_event_destroy(event) }
        guard rd_kafka_event_error(event) == RD_KAFKA_RESP_ERR_NO_ERROR, let result = rd_kafka_event_DescribeConfigs_result(event) else {
            return nil
        }
        var count = 0
        guard let resources = rd_kafka_DescribeConfigs_result_resources(result, &count), count == 1,
            rd_kafka_ConfigResource_error(resources[0]) == RD_KAFKA_RESP_ERR_NO_ERROR
        else { return nil }
        var entryCount = 0
        guard let entries = rd_kafka_ConfigResource_configs(resources[0], &entryCount) else { return nil }
        for i in 0..<entryCount where String(cString: rd_kafka_ConfigEntry_name(entries[i])) == name {
            return rd_kafka_ConfigEntry_value(entries[i]).map { String(cString: $0) }
        }
        return nil
    }
}
