/// The `apns-push-type` of an HTTP/2 request (SPEC section 9): what kind of notification it is, which decides the
/// topic's suffix and the payload limit.
public enum PushType: String, CaseIterable, Hashable, Sendable {
    case alert, background, location, voip, complication, fileprovider, mdm, liveactivity, pushtotalk, widgets

    /// What `apns-topic` adds to the app's bundle id. mdm uses the app entry's `topic` instead.
    public var topicSuffix: String {
        switch self {
        case .alert, .background, .mdm: ""
        case .voip: ".voip"
        case .complication: ".complication"
        case .fileprovider: ".pushkit.fileprovider"
        case .location: ".location-query"
        case .liveactivity: ".push-type.liveactivity"
        case .pushtotalk: ".voip-ptt"
        case .widgets: ".push-type.widgets"
        }
    }

    /// `apns-push-type`'s value, ``rawValue`` as static text (nothing to build when writing it).
    var staticName: StaticString {
        switch self {
        case .alert: "alert"
        case .background: "background"
        case .location: "location"
        case .voip: "voip"
        case .complication: "complication"
        case .fileprovider: "fileprovider"
        case .mdm: "mdm"
        case .liveactivity: "liveactivity"
        case .pushtotalk: "pushtotalk"
        case .widgets: "widgets"
        }
    }

    /// The largest body Apple accepts for this push type.
    public var maxPayloadSize: Int {
        if case .voip = self { return 5120 }
        return 4096
    }

    /// The largest body of any push type: what `validate --format http2` allows before knowing the type.
    public static let largestPayloadSize = 5120

    /// `allCases` made once (the synthesized one builds its array on each call).
    private static let cases = allCases

    /// Parses the field's bytes without building a String.
    static func parse(_ bytes: UnsafeRawBufferPointer) -> PushType? {
        for type in cases where type.rawValue.utf8.elementsEqual(bytes) { return type }
        return nil
    }
}

