import Crdkafka

/// librdkafka's in-process mock Kafka cluster, for unit tests and the demo. It owns a client handle of its own
/// (the mock cluster runs on that handle's threads) and destroys both, cluster first.
public final class KafkaMockCluster: Sendable {
    private nonisolated(unsafe) let client: OpaquePointer
    private nonisolated(unsafe) let cluster: OpaquePointer
    /// `bootstrap.servers` for clients of this cluster.
    public let bootstrapServers: String

    public init(brokers: Int32 = 1) throws(KafkaError) {
        let configuration = try KafkaConfigurationHandle(["log_level": "3"])
        client = try configuration.makeClient(RD_KAFKA_PRODUCER)
        guard let cluster = rd_kafka_mock_cluster_new(client, brokers) else {
            rd_kafka_destroy(client)
            throw KafkaError("cannot create the mock cluster")
        }
        self.cluster = cluster
        bootstrapServers = String(cString: rd_kafka_mock_cluster_bootstraps(cluster))
    }

    /// Creates a topic (the admin API does not work against the mock cluster).
    public func createTopic(_ name: String, partitions: Int32) throws(KafkaError) {
        let error = rd_kafka_mock_topic_create(cluster, name, partitions, 1)
        guard error == RD_KAFKA_RESP_ERR_NO_ERROR else { throw KafkaError(error, "cannot create topic \(name)") }
    }

    /// Kafka API keys whose requests can be made to fail.
    public enum API: Int16, Sendable {
        case produce = 0
        case fetch = 1
        case offsetCommit = 8
        case offsetFetch = 9
    }

    /// The next `count` requests of `api` fail with a retriable error (leader not available / coordinator loading),
    /// or, `permanent`, with one a client does not retry (a produce request's message set too large).
    public func failNextRequests(_ api: API, count: Int, permanent: Bool = false) {
        let error: rd_kafka_resp_err_t = permanent ? RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE
            : api == .offsetCommit || api == .offsetFetch ? RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS : RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION
        var errors = [rd_kafka_resp_err_t](repeating: error, count: count)
        rd_kafka_mock_push_request_errors_array(cluster, api.rawValue, errors.count, &errors)
    }

    /// Delays every response of broker `id` (1-based) by `milliseconds` (a coordinator that stops answering).
    public func setRoundTrip(broker id: Int32, milliseconds: Int32) {
        _ = rd_kafka_mock_broker_set_rtt(cluster, id, milliseconds)
    }

    deinit {
        rd_kafka_mock_cluster_destroy(cluster)
        rd_kafka_destroy(client)
    }
}
