import PushKafka
import Testing
@testable import PushWorker

@Suite struct ReplayStartTests {
    @Test func offsetsNamingATopicApplyToItAloneAndWinOverThoseForEveryTopic() {
        let start = ReplayStart.offsets([
            .init(topic: nil, partition: 0, offset: 10), .init(topic: nil, partition: 1, offset: 11),
            .init(topic: "b", partition: 1, offset: 99),
        ])
        guard case .offsets(let a) = start.start(for: "a"), case .offsets(let b) = start.start(for: "b") else {
            Issue.record("not offsets")
            return
        }
        #expect(a == [0: 10, 1: 11])
        #expect(b == [0: 10, 1: 99])
        #expect(start.unknownTopics(["a", "b"]).isEmpty)
        #expect(start.unknownTopics(["a"]) == ["b"])
        #expect(ReplayStart.earliest.unknownTopics([]).isEmpty)
    }
}
