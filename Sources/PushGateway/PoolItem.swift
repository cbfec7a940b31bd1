import PushCore

/// What a ``PoolStateMachine`` queues and hands to its connections: one notification on its way, in either transport.
protocol PoolItem: Sendable {
    /// Failures counted against it; the simple format's halving counts here the closes it met alone on a connection.
    var transientFailures: Int { get set }
    /// Its outcome when the pool itself fails it.
    func failedByPool(_ reason: DeliveryErrorReason, _ detail: String) -> DeliveryOutcome
}

extension Delivery: PoolItem {
    func failedByPool(_ reason: DeliveryErrorReason, _ detail: String) -> DeliveryOutcome {
        .failed(self, reason, status: nil, detail)
    }
}

extension HTTP2Delivery: PoolItem {
    func failedByPool(_ reason: DeliveryErrorReason, _ detail: String) -> DeliveryOutcome {
        outcome(.failed(reason, status: nil, detail: detail))
    }
}

/// How much one connection of a pool may hold: the binary transport's ``SendWindow`` (written and not yet
/// accepted), the HTTP/2 transport's ``StreamWindow`` (open streams). The pool shares one among its connections.
protocol ConnectionCapacity: Sendable {
    /// The most one connection may hold now.
    var limit: Int { get }
    /// A connection ended with no answer, losing what it held, after `accepted` were accepted on it.
    mutating func lost(acceptedOnConnection accepted: Int)
}

extension SendWindow: ConnectionCapacity {}
