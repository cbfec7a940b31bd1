/// A Kafka partition of a topic.
public struct TopicPartition: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var topic: String
    public var partition: Int32

    public init(topic: String, partition: Int32) {
        self.topic = topic
        self.partition = partition
    }

    public var description: String { "\(topic)[\(partition)]" }

    public static func < (a: TopicPartition, b: TopicPartition) -> Bool {
        (a.topic, a.partition) < (b.topic, b.partition)
    }
}

