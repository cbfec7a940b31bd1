/// How many notifications one connection to a gateway may hold unaccepted: the binary protocol acknowledges
/// nothing, so everything written since the acceptance window began is at stake when the connection ends. Pure; the
/// pool keeps one per gateway, shared by its connections.
///
/// - It starts at `initial` (the engine uses `maxInFlight`: no limit of its own until a connection ends early) and
///   grows while connections fill it and their notifications pass the acceptance window: by what was accepted
///   (doubling per window) up to `threshold`, then by an eighth of it.
/// - A connection that ends losing what it held (a close with no error response, or a status 10 with
///   notifications after the one it named) before a window's worth of notifications was accepted on it halves the
///   window (never below `minimum`) and sets `threshold` there. So a gateway that ends connections sooner than the
///   acceptance window passes still sees progress (with an unbounded window nothing would ever be accepted there),
///   and what one end can make the worker resend stays near what the gateway lets a connection carry.
/// - A connection that carried at least a window's worth before it ended says nothing against the window, nor do
///   error responses about one notification (an invalid token, say).
struct SendWindow: Sendable, Equatable {
    let minimum: Int
    let maximum: Int
    private(set) var limit: Int
    private(set) var threshold: Int

    init(initial: Int, minimum: Int = 1, maximum: Int) {
        self.minimum = max(1, minimum)
        self.maximum = max(self.minimum, maximum)
        self.limit = Swift.min(self.maximum, Swift.max(self.minimum, initial))
        self.threshold = self.maximum
    }

    /// `accepted` notifications passed the acceptance window on a connection that held `held` before they left.
    /// Grows only when the connection used at least half of the window: an idle connection proves nothing.
    mutating func accepted(_ accepted: Int, held: Int) {
        guard accepted > 0, held * 2 >= limit else { return }
        let step = limit < threshold ? accepted : Swift.max(1, accepted / 8)
        limit = Swift.min(maximum, limit + step)
    }

    /// Whether a connection that ends now, after `accepted` notifications were accepted on it, ended early for the
    /// window: before a window's worth was accepted while the window can still shrink. Such an end shrinks the
    /// window instead of counting against the oldest notification on the connection, which may well have arrived
    /// (a poison notification that breaks every connection still fails once the window is at its minimum).
    func blamesWindow(acceptedOnConnection accepted: Int) -> Bool {
        accepted < limit && limit > minimum
    }

    /// A connection ended losing what it held unaccepted, after `acceptedOnConnection` notifications were accepted
    /// on it.
    mutating func lost(acceptedOnConnection accepted: Int) {
        guard accepted < limit else { return }
        limit = Swift.max(minimum, limit / 2)
        threshold = limit
    }
}
