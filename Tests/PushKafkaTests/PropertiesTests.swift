import Testing
@testable import PushKafka

@Suite struct PropertiesTests {
    @Test func specificPropertiesWinAndSecurityPassesThrough() {
        let p = KafkaClientProperties(
            brokers: "b:9092", common: ["security.protocol": "ssl", "client.id": "common"],
            consumer: ["client.id": "consumer", "session.timeout.ms": "6000"], producer: ["linger.ms": "1"])
        #expect(p.consumerProperties(groupID: "g") == [
            "bootstrap.servers": "b:9092", "group.id": "g", "security.protocol": "ssl", "client.id": "consumer",
            "session.timeout.ms": "6000",
        ])
        #expect(p.producerProperties == ["bootstrap.servers": "b:9092", "security.protocol": "ssl", "client.id": "common", "linger.ms": "1"])
    }

    @Test func anUnknownPropertyIsRefusedByName() {
        let error = #expect(throws: KafkaError.self) {
            _ = try KafkaProducer(properties: ["bootstrap.servers": "127.0.0.1:1", "no.such.property": "1"])
        }
        #expect(error?.description.contains("no.such.property") == true)
    }

    @Test func theLinkedLibraryIsRecentEnough() throws {
        try LibRDKafka.checkVersion()
        #expect(LibRDKafka.versionString.hasPrefix("2."))
    }
}
