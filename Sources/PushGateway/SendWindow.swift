/// How many notifications one connection to a gateway may hold unaccepted: the binary protocol acknowledges
/// nothing, so everything written since the acceptance window began is at stake when the connection ends. Pure; the
/// pool keeps one per gateway, shared by its connections.
///
/// - It starts at `initial` (the engine uses `maxInFlight`: no limit of its own until a connection ends early) and
///   grows while connections fill it and their notifications pass the acceptance window: by what was accepted
///   (doubling per window) up to `threshold`, then by an eighth of it.
/// - A connection that closes with no error response before a window's worth of notifications was accepted on it
///   halves the window (never below `minimum`) and sets `threshold` there. So a gateway that ends connections
///   sooner than the acceptance window passes still sees progress (with an unbounded window nothing would ever be
///   accepted there). A connection that carried at least a window's worth before it closed says nothing against
///   the window.
/// - An error response (status 10, a processing error, or one about a notification's data such as an invalid
///   token) after which more notifications must be resent than the connection delivered (and more than
///   ``toleratedResends``) halves it too: what followed the named notification was written while the answer was
///   on its way, and with no bound a burst fills every buffer between the two ends, so that each such answer
///   costs thousands of resends (with 5% of events to distinct invalid tokens, every connection delivered about
///   20 and then wrote its whole window again: over 300 writes per event). It never halves below four times what
///   such connections deliver on average (`carried`, a moving average): a window below a connection's lifetime
///   would make the connection wait on the acceptance window before its answer ends it, and where answers come
///   at random (processing errors, invalid tokens) that wait costs more than the resends. Each answer then costs
///   a few connections' worth at most, and rare answers (a connection delivering more than it resends) shrink
///   nothing.
struct SendWindow: Sendable, Equatable {
    let minimum: Int
    let maximum: Int
    private(set) var limit: Int
    private(set) var threshold: Int
    /// What connections ended by the gateway's own answer delivered, on average (weight 1/8 to the newest).
    private(set) var carried: Double?

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
        halve()
    }

    /// Resends after a gateway's answer that shrink nothing: a few are the cost of any pipelining.
    static let toleratedResends = 16

    /// An error response ended a connection on which `accepted` notifications were accepted (those before the named
    /// one included); `resent`, written after the named one, go again.
    /// - Parameter aboutData: the answer was about the named notification's data (status 2 to 8): the halving keeps
    ///   the threshold, so the window doubles back per acceptance window once such answers stop (they come from
    ///   the events, not from the gateway's state: once a token is suppressed, say, its rejections end at once).
    mutating func gatewayAnswered(resent: Int, acceptedOnConnection accepted: Int, aboutData: Bool = false) {
        let average = carried.map { $0 + (Double(accepted) - $0) / 8 } ?? Double(accepted)
        carried = average
        guard resent > Swift.max(accepted, Self.toleratedResends) else { return }
        let halved = Swift.max(minimum, limit / 2, Int((4 * average).rounded(.up)))
        guard halved < limit else { return }
        limit = halved
        if !aboutData { threshold = limit }
    }

    private mutating func halve() {
        limit = Swift.max(minimum, limit / 2)
        threshold = limit
    }
}
