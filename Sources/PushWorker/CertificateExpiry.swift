import Foundation
import Logging
import NIOSSL
import PushGateway

/// When an app's client certificate stops being valid. Apple's push certificates last a year and an expired one
/// fails every connection's handshake, so the worker says so twice: at start, a warning in the log from 30 days
/// before (an error once it has passed), and always on `/metrics` as
/// `pushworker_certificate_expiry_timestamp_seconds{app}` (UNIX seconds) for an alert rule. Pure.
struct CertificateExpiry: Sendable, Equatable {
    /// How long before the end the start-up log warns.
    static let warningPeriod: Int64 = 30 * 86_400

    let app: AppKey
    /// The leaf certificate's `notValidAfter`, UNIX seconds.
    let notAfter: Int64

    init(app: AppKey, notAfter: Int64) {
        self.app = app
        self.notAfter = notAfter
    }

    /// The end of the leaf of `certificates` (a certificate file's chain, leaf first); nil without one (token
    /// authentication).
    init?(app: AppKey, certificates: [NIOSSLCertificate]) {
        guard let leaf = certificates.first else { return nil }
        self.init(app: app, notAfter: Int64(leaf.notValidAfter))
    }

    /// What the start-up log says about it at `now` (UNIX seconds): nothing while more than ``warningPeriod``
    /// remains.
    func notice(now: Int64) -> (level: Logger.Level, message: Logger.Message)? {
        let remaining = notAfter - now
        if remaining <= 0 {
            return (.error, "the client certificate has expired: the gateway will refuse every connection until it is replaced")
        }
        guard remaining < Self.warningPeriod else { return nil }
        let (days, hours) = (remaining / 86_400, remaining / 3600)
        let left = days >= 1 ? "\(days) day\(days == 1 ? "" : "s")" : hours >= 1 ? "\(hours) hour\(hours == 1 ? "" : "s")" : "less than an hour"
        return (.warning, "the client certificate expires in \(left): replace it before then")
    }

    /// `notAfter` as RFC 3339 UTC.
    var notAfterText: String { Date(timeIntervalSince1970: TimeInterval(notAfter)).formatted(.iso8601) }
}
