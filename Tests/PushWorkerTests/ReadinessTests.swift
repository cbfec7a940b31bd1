import PushCore
import Testing
@testable import PushGateway
@testable import PushWorker

@Suite struct ReadinessTests {
    let app = AppKey(app: "com.example.app", environment: .production)
    let other = AppKey(app: "com.example.other", environment: .production)

    func status(ready: Int, ever: Bool, refused: Bool = false, lastError: String? = nil, lastEnd: String? = nil) -> PoolStatus {
        PoolStatus(
            readyConnections: ready, pending: 0, connectionAttempts: 1, lastError: lastError, consecutiveFailures: 0,
            lateErrorResponses: 0, written: 0, everConnected: ever, credentialsRefused: refused, lastEnd: lastEnd,
            events: [])
    }

    @Test func notReadyWhileTheProviderAPIRefusesAnHTTP2AppsCredentials() {
        var refused = status(ready: 2, ever: true)
        refused.refusedByAPI = "InvalidProviderToken"
        let r = Readiness.evaluate(assignedPartitions: 3, apps: [app: status(ready: 1, ever: true), other: refused])
        #expect(!r.ready)
        #expect(r.detail == "com.example.other/production: the provider API refuses the credentials: InvalidProviderToken")
    }

    @Test func notReadyWhileTheSuppressionTopicIsRead() {
        let loading = Readiness.evaluate(assignedPartitions: 0, apps: [app: status(ready: 2, ever: true)], suppressionLoaded: false)
        #expect(!loading.ready)
        #expect(loading.detail == "the suppression topic is still being read")
        #expect(Readiness.evaluate(assignedPartitions: 3, apps: [app: status(ready: 2, ever: true)], suppressionLoaded: true).ready)
    }

    @Test func notReadyWithoutPartitions() {
        let r = Readiness.evaluate(assignedPartitions: 0, apps: [app: status(ready: 2, ever: true)])
        #expect(!r.ready)
        #expect(r.detail == "no partitions assigned yet")
    }

    @Test func notReadyBeforeAnAppEverConnected() {
        let r = Readiness.evaluate(
            assignedPartitions: 3,
            apps: [app: status(ready: 1, ever: true), other: status(ready: 0, ever: false, lastError: "connection refused")])
        #expect(!r.ready)
        #expect(r.detail == "com.example.other/production: not connected yet; last attempt: connection refused")
    }

    @Test func notReadyWhileCredentialsAreRefusedEvenAfterEarlierSuccess() {
        let r = Readiness.evaluate(
            assignedPartitions: 3, apps: [app: status(ready: 0, ever: true, refused: true, lastError: "handshakeFailed(bad certificate)")])
        #expect(!r.ready)
        #expect(r.detail.contains("credentials refused"))
        #expect(r.detail.contains("bad certificate"))
    }

    @Test func readyWhileReconnectingAfterARoutineEnd() {
        let r = Readiness.evaluate(
            assignedPartitions: 3,
            apps: [app: status(ready: 0, ever: true, lastEnd: "errorResponse(shutdown(10))"), other: status(ready: 2, ever: true)])
        #expect(r.ready)
        #expect(r.detail == "ready: 3 partitions; com.example.app/production: reconnecting after errorResponse(shutdown(10))")
        let all = Readiness.evaluate(assignedPartitions: 3, apps: [app: status(ready: 1, ever: true)])
        #expect(all.ready && all.detail == "ready: 3 partitions, every app connected")
    }
}
