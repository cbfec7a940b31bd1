/// The librdkafka properties of SPEC section 7's `kafka` block: `properties` go to every client, then
/// `consumer_properties` or `producer_properties` on top, as-is (so `security.protocol`, `sasl.*` and `ssl.*` work
/// by pass-through). librdkafka itself rejects an unknown property, naming it.
public struct KafkaClientProperties: Sendable, Hashable {
    public var brokers: String
    public var common: [String: String]
    public var consumer: [String: String]
    public var producer: [String: String]

    public init(brokers: String, common: [String: String] = [:], consumer: [String: String] = [:], producer: [String: String] = [:]) {
        self.brokers = brokers
        self.common = common
        self.consumer = consumer
        self.producer = producer
    }

    /// Properties for the worker's consumer in `groupID`.
    public func consumerProperties(groupID: String) -> [String: String] {
        var p: [String: String] = ["bootstrap.servers": brokers, "group.id": groupID]
        p.merge(common) { $1 }
        p.merge(consumer) { $1 }
        return p
    }

    public var producerProperties: [String: String] {
        var p: [String: String] = ["bootstrap.servers": brokers]
        p.merge(common) { $1 }
        p.merge(producer) { $1 }
        return p
    }
}
