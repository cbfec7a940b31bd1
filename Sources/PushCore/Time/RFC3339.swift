/// RFC 3339 timestamps, UTC, with second precision, without Foundation.
public enum RFC3339 {
    /// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` into UNIX seconds; the fraction is dropped.
    /// `T` and `Z` may be lower case (RFC 3339 section 5.6); a leap second (`:60`) counts as the next second.
    /// A time whose offset moves it outside the years 0000–9999 in UTC (`0000-01-01T00:30:00+01:00`) is refused:
    /// ``format(unixSeconds:)`` could not write it back in this form.
    public static func parse(_ text: some StringProtocol) -> Int64? {
        var utf8 = Array(text.utf8)
        return utf8.withUnsafeMutableBytes { parse(UnsafeRawBufferPointer($0)) }
    }

    public static func parse(_ s: UnsafeRawBufferPointer) -> Int64? {
        guard s.count >= 20 else { return nil }
        func digits(_ from: Int, _ count: Int) -> Int64? {
            var v: Int64 = 0
            for i in from..<(from + count) {
                let d = s[i] &- UInt8(ascii: "0")
                guard d < 10 else { return nil }
                v = v * 10 + Int64(d)
            }
            return v
        }
        guard let year = digits(0, 4), s[4] == UInt8(ascii: "-"), let month = digits(5, 2), s[7] == UInt8(ascii: "-"),
            let day = digits(8, 2), s[10] | 0x20 == UInt8(ascii: "t"), let hour = digits(11, 2),
            s[13] == UInt8(ascii: ":"), let minute = digits(14, 2), s[16] == UInt8(ascii: ":"),
            let second = digits(17, 2)
        else { return nil }
        guard (1...12).contains(month), day >= 1, day <= daysInMonth(year: year, month: month),
            hour <= 23, minute <= 59, second <= 60
        else { return nil }
        var i = 19
        if s[i] == UInt8(ascii: ".") {
            i += 1
            let fractionStart = i
            while i < s.count, s[i] &- UInt8(ascii: "0") < 10 { i += 1 }
            guard i > fractionStart else { return nil }
        }
        guard i < s.count else { return nil }
        var offsetSeconds: Int64 = 0
        if s[i] | 0x20 == UInt8(ascii: "z") {
            i += 1
        } else if s[i] == UInt8(ascii: "+") || s[i] == UInt8(ascii: "-") {
            guard i + 6 <= s.count, let oh = digits(i + 1, 2), s[i + 3] == UInt8(ascii: ":"),
                let om = digits(i + 4, 2), oh <= 23, om <= 59
            else { return nil }
            offsetSeconds = (oh * 3600 + om * 60) * (s[i] == UInt8(ascii: "+") ? 1 : -1)
            i += 6
        } else {
            return nil
        }
        guard i == s.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return representable.contains(seconds) ? seconds : nil
    }

    /// UNIX seconds from 0000-01-01T00:00:00Z to 9999-12-31T23:59:59Z, the times this form writes with four digits.
    static var representable: ClosedRange<Int64> { -62_167_219_200...253_402_300_799 }

    /// Formats UNIX seconds as `YYYY-MM-DDTHH:MM:SSZ`.
    public static func format(unixSeconds: Int64) -> String {
        let days = unixSeconds >= 0 ? unixSeconds / 86400 : (unixSeconds - 86399) / 86400
        let secondsOfDay = unixSeconds - days * 86400
        let (y, m, d) = civilFromDays(days)
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(secondsOfDay / 3600, 2)):\(pad(secondsOfDay / 60 % 60, 2)):\(pad(secondsOfDay % 60, 2))Z"
    }

    /// Formats a time with millisecond precision, `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    public static func format(unixMilliseconds: Int64) -> String {
        let seconds = unixMilliseconds >= 0 ? unixMilliseconds / 1000 : (unixMilliseconds - 999) / 1000
        let millis = unixMilliseconds - seconds * 1000
        var text = format(unixSeconds: seconds)
        text.removeLast()
        return text + "." + pad(millis, 3) + "Z"
    }

    /// Appends what ``format(unixMilliseconds:)`` returns to `out` as bytes, with no `String` between (the
    /// simulator's record file writes one per notification).
    public static func append(unixMilliseconds: Int64, to out: inout [UInt8]) {
        let seconds = unixMilliseconds >= 0 ? unixMilliseconds / 1000 : (unixMilliseconds - 999) / 1000
        let millis = unixMilliseconds - seconds * 1000
        let days = seconds >= 0 ? seconds / 86400 : (seconds - 86399) / 86400
        let secondsOfDay = seconds - days * 86400
        let (y, m, d) = civilFromDays(days)
        guard (0...9999).contains(y) else {
            out.append(contentsOf: format(unixMilliseconds: unixMilliseconds).utf8)
            return
        }
        @inline(__always) func digits(_ value: Int64, _ width: Int, then separator: UInt8) {
            var divisor: Int64 = 1
            for _ in 1..<width { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                out.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: rest / divisor))
                rest %= divisor
                divisor /= 10
            }
            out.append(separator)
        }
        digits(y, 4, then: UInt8(ascii: "-"))
        digits(m, 2, then: UInt8(ascii: "-"))
        digits(d, 2, then: UInt8(ascii: "T"))
        digits(secondsOfDay / 3600, 2, then: UInt8(ascii: ":"))
        digits(secondsOfDay / 60 % 60, 2, then: UInt8(ascii: ":"))
        digits(secondsOfDay % 60, 2, then: UInt8(ascii: "."))
        digits(millis, 3, then: UInt8(ascii: "Z"))
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let s = String(value)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }

    static func isLeapYear(_ y: Int64) -> Bool { (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }

    static func daysInMonth(year: Int64, month: Int64) -> Int64 {
        switch month {
        case 2: isLeapYear(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146097 + doe - 719468
    }

    static func civilFromDays(_ z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719468
        let era = (z >= 0 ? z : z - 146096) / 146097
        let doe = z - era * 146097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
