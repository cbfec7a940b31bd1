import Metrics
import NIOCore
import Synchronization

/// What the binary and the HTTP/2 pool share around their ``PoolStateMachine``: the machine and the pool's own
/// state (`Extra`) behind one lock, the timers the machine asked for (cancelled on stop), connection attempts when
/// they are due, the status, and a stop that waits until every slot has finished.
final class PoolShell<Connection: Sendable, Item: PoolItem, Capacity: ConnectionCapacity, Extra: Sendable>: Sendable {
    typealias Machine = PoolStateMachine<ContinuousClock.Instant, Connection, Item, Capacity>

    struct State: Sendable {
        var machine: Machine
        var extra: Extra
        /// Scheduled attempts and resends, by the machine's timer number.
        var timers: [Int: Scheduled<Void>] = [:]
        var stopWaiter: CheckedContinuation<Void, Never>?

        /// The stop's waiter, once the machine says every slot has finished.
        mutating func takeStopWaiter() -> CheckedContinuation<Void, Never>? {
            guard machine.isStopComplete, let waiter = stopWaiter else { return nil }
            stopWaiter = nil
            return waiter
        }
    }

    let clock = ContinuousClock()
    let group: any EventLoopGroup
    private let state: Mutex<State>
    /// The app's connection metrics (docs/monitoring.md), the same for both transports.
    private let attempts: Counter
    private let ready: Gauge
    /// Attempts per connect cap, and the attempts the cap delayed.
    private let capAttempts: [ConnectCap: Counter]
    private let capDelayed: [ConnectCap: Counter]

    init(machine: Machine, extra: Extra, group: any EventLoopGroup, app: String) {
        self.group = group
        state = Mutex(State(machine: machine, extra: extra))
        attempts = Counter(label: "pushworker_connection_attempts_total", dimensions: [("app", app)])
        ready = Gauge(label: "pushworker_connections_ready", dimensions: [("app", app)])
        capAttempts = Dictionary(uniqueKeysWithValues: ConnectCap.allCases.map {
            ($0, Counter(label: "pushworker_connect_cap_attempts_total", dimensions: [("app", app), ("cap", $0.rawValue)]))
        })
        capDelayed = Dictionary(uniqueKeysWithValues: ConnectCap.allCases.map {
            ($0, Counter(label: "pushworker_connect_cap_delayed_total", dimensions: [("app", app), ("cap", $0.rawValue)]))
        })
    }

    /// Records how many connections are ready (after a connection became ready or ended).
    func recordReady(_ count: Int) {
        ready.record(count)
    }

    func withLock<R: Sendable>(_ body: (inout State) -> R) -> R {
        state.withLock { body(&$0) }
    }

    /// Schedules every slot's first attempt; `open` opens a slot's connection when its attempt is due.
    func start(open: @escaping @Sendable (Int) -> Void) {
        let now = clock.now
        withLock { s in
            for timer in s.machine.start(now: now) { schedule(timer, in: &s, open: open) }
        }
    }

    /// Schedules an attempt the machine asked for (under the lock, so that a stop cancels it). When it is due,
    /// `open` opens the slot's connection, unless the pool stopped or the attempt is no longer the slot's.
    func schedule(_ timer: Machine.ConnectTimer, in s: inout State, open: @escaping @Sendable (Int) -> Void) {
        capAttempts[timer.cap]?.increment()
        if timer.capDelay > .zero { capDelayed[timer.cap]?.increment() }
        s.timers[timer.timer] = group.next().scheduleTask(in: .nanoseconds(max(0, timer.after.nanoseconds))) {
            let now = self.clock.now
            let (proceed, waiter) = self.withLock { s in
                s.timers[timer.timer] = nil
                return (s.machine.timerFired(slot: timer.slot, timer: timer.timer, now: now), s.takeStopWaiter())
            }
            waiter?.resume()
            guard proceed else { return }
            self.attempts.increment()
            open(timer.slot)
        }
    }

    /// Stops opening connections and closes the open ones (`close` with those the machine names and those
    /// `alsoClosing` adds); returns what was never settled, in order, once every slot has finished.
    func stop(
        alsoClosing: @Sendable (Extra) -> [Connection] = { _ in [] }, close: ([Connection]) -> Void
    ) async -> [Item] {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let (connections, waiter) = withLock { s in
                s.stopWaiter = continuation
                let action = s.machine.stop()
                for timer in action.cancel { s.timers.removeValue(forKey: timer)?.cancel() }
                return (action.close + alsoClosing(s.extra), s.takeStopWaiter())
            }
            close(connections)
            waiter?.resume()
        }
        return withLock { $0.machine.takeUnsent() }
    }

    /// The pool's status; `written` is the pool's own count of notifications written.
    func status(written: Int) -> PoolStatus {
        withLock { s in
            let m = s.machine
            return PoolStatus(
                readyConnections: m.readyConnections, pending: m.waitingCount, connectionAttempts: m.attempts,
                lastError: m.lastError, consecutiveFailures: m.backoff.consecutiveFailures,
                lateErrorResponses: m.lateErrorResponses, written: written, everConnected: m.everConnected,
                credentialsRefused: m.credentialsRefused, lastEnd: m.lastEnd.map { "\($0)" },
                events: m.log.map { PoolEvent(slot: $0.slot, kind: $0.kind, at: $0.at) }, refusedByAPI: m.refusedByAPI)
        }
    }
}
