/// What the gateway checks of a payload it receives: a JSON object holding an `aps` object, and whether that `aps`
/// holds only `content-available` (then priority 10 is an error, seeds item 5).
///
/// This is deliberately less than the event validation: the gateway does not type-check `aps` keys.
public struct PayloadInspection: Hashable, Sendable {
    /// What is wrong, or nil when the payload is acceptable.
    public var problem: String?
    public var contentAvailableOnly: Bool

    public init(_ payload: [UInt8]) {
        let result = payload.withUnsafeBytes { raw in
            Result { () throws(JSONSyntaxError) in try PayloadInspection.inspect(raw) }
        }
        switch result {
        case .success(let inspection): self = inspection
        case .failure(let error): self.init(problem: "payload is \(error.description)", contentAvailableOnly: false)
        }
    }

    init(problem: String?, contentAvailableOnly: Bool) {
        self.problem = problem
        self.contentAvailableOnly = contentAvailableOnly
    }

    private static func inspect(_ bytes: UnsafeRawBufferPointer) throws(JSONSyntaxError) -> PayloadInspection {
        var reader = JSONReader(bytes)
        reader.skipWhitespace()
        guard reader.kindOfNextValue() == .object else {
            try reader.skipValue(depth: 0)
            try reader.expectEnd()
            return PayloadInspection(problem: "payload is not a JSON object", contentAvailableOnly: false)
        }
        reader.position += 1
        var apsFound = false
        var apsIsObject = false
        var contentAvailableOnly = false
        if try !reader.objectIsEmpty() {
            repeat {
                let key = try reader.readKey()
                guard reader.string(key, equals: "aps"), !apsFound, reader.kindOfNextValue() == .object else {
                    apsFound = apsFound || reader.string(key, equals: "aps")
                    try reader.skipValue(depth: 1)
                    continue
                }
                apsFound = true
                apsIsObject = true
                reader.position += 1
                var keys = 0
                var hasContentAvailable = false
                if try !reader.objectIsEmpty() {
                    repeat {
                        let apsKey = try reader.readKey()
                        keys += 1
                        hasContentAvailable = hasContentAvailable || reader.string(apsKey, equals: "content-available")
                        try reader.skipValue(depth: 2)
                    } while try reader.nextMember(close: UInt8(ascii: "}"))
                }
                contentAvailableOnly = keys == 1 && hasContentAvailable
            } while try reader.nextMember(close: UInt8(ascii: "}"))
        }
        try reader.expectEnd()
        guard apsIsObject else {
            return PayloadInspection(
                problem: apsFound ? "'aps' is not an object" : "payload has no 'aps' object", contentAvailableOnly: false)
        }
        return PayloadInspection(problem: nil, contentAvailableOnly: contentAvailableOnly)
    }
}
