import PushCore

/// One notification on its way over the HTTP/2 provider API: its request and a few words. The pool holds this per
/// notification until its response is final.
public struct HTTP2Delivery: Sendable {
    /// The caller's reference, echoed in the outcome.
    public var ticket: DeliveryTicket
    public let request: APNsRequest
    /// Times a stream was opened for it.
    public internal(set) var sends = 0
    /// Counted failures (5xx, 429, refused credentials, a lost connection, a deadline): `max_attempts` bounds them.
    public internal(set) var transientFailures = 0
    /// Uncounted resends after 403 ExpiredProviderToken: one is free, a second counts (a clock far off would otherwise
    /// make every new token expired and resend forever).
    var tokenRenewalResends: UInt8 = 0
    /// Resends uncounted since the server last answered it: requests it did not process (REFUSED_STREAM, above a
    /// GOAWAY's last stream id). Past ``HTTP2ResponsePolicy/maxUncountedInARow`` they count, so a server that refuses
    /// everything ends each notification instead of drawing it again forever.
    var unprocessedInARow: UInt8 = 0
    /// The provider token its last request carried: a 403 ExpiredProviderToken renews that one only (several
    /// answers about one token make one renewal).
    var authorization: String?

    public init(ticket: DeliveryTicket, request: APNsRequest) {
        self.ticket = ticket
        self.request = request
    }

    /// UNIX seconds; 0 never expires.
    public var expiration: UInt32 { request.expiration }

    /// Its device token, the request's.
    public var tokenSource: DeliveryTokenSource { DeliveryTokenSource(request.token) }
}

extension HTTP2Delivery {
    /// Its outcome, with its request's apns-id once it was sent (SPEC section 3: null for events never sent).
    func outcome(_ result: DeliveryOutcome.Result, httpStatus: UInt16? = nil) -> DeliveryOutcome {
        var outcome = DeliveryOutcome(ticket: ticket, tokenSource: tokenSource, result: result, attempts: sends, httpStatus: httpStatus)
        if sends > 0 { outcome.apnsID = request.apnsID }
        return outcome
    }
}
