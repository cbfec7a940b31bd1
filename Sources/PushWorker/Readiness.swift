import PushGateway

/// What `/readyz` answers (pure: from the consumer's assignment and each app's pool status).
///
/// Not ready: the suppression topic not read up to its end yet (SPEC section 10); no partitions assigned yet; an app that has never connected; an app whose last attempt failed in the
/// TLS handshake (credentials refused, by the gateway or by us) with no connection ready since; an HTTP/2 app whose
/// requests the provider API refuses with a 403 about its credentials. An app between
/// connections after a known cause (status 10, a close, a refused TCP connection after it had connected) is ready:
/// reconnecting is routine, and a readiness probe that flapped with it would stall a rollout. The body says why.
public enum Readiness {
    /// - Parameter suppressionLoaded: whether the suppression topic has been read (nil without one).
    public static func evaluate(
        assignedPartitions: Int, apps: [AppKey: PoolStatus], suppressionLoaded: Bool? = nil
    ) -> (ready: Bool, detail: String) {
        if suppressionLoaded == false { return (false, "the suppression topic is still being read") }
        guard assignedPartitions > 0 else { return (false, "no partitions assigned yet") }
        var notes: [String] = []
        for (app, status) in apps.sorted(by: { $0.key.description < $1.key.description }) {
            if let reason = status.refusedByAPI { return (false, "\(app): the provider API refuses the credentials: \(reason)") }
        }
        for (app, status) in apps.sorted(by: { $0.key.description < $1.key.description }) where status.readyConnections == 0 {
            if status.credentialsRefused {
                return (false, "\(app): the TLS handshake failed (credentials refused?): \(status.lastError ?? "")")
            }
            guard status.everConnected else {
                let last = status.lastError.map { "; last attempt: \($0)" } ?? ""
                return (false, "\(app): not connected yet\(last)")
            }
            notes.append("\(app): reconnecting after \(status.lastEnd ?? status.lastError ?? "a close")")
        }
        guard notes.isEmpty else { return (true, "ready: \(assignedPartitions) partitions; " + notes.joined(separator: "; ")) }
        return (true, "ready: \(assignedPartitions) partitions, every app connected")
    }
}
