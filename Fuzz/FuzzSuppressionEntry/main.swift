// libFuzzer target: reading a record of the suppression topic (SPEC section 10), which any producer can write.
//
// The input is a key and a value: the key runs to the first NUL byte and the value is the rest; without a NUL the
// whole input is the key of a tombstone. It must not trap, and:
// - the key alone decides whether a record is read at all: a key that is no tombstone's is no record's either;
// - an error names at most a bounded piece of the record (it goes to a log line per skipped record): 120 bytes of
//   the key or the app, each at most one character (a byte that is no UTF-8 is shown as U+FFFD);
// - a record read with a value is about the token its key names as a tombstone, and written again (its key and
//   value as the worker writes them) reads back the same when its time is one RFC 3339 can write (years 0000-9999);
// - applied to a suppression table it is found with its reason and its time clamped to what the table keeps, and a
//   tombstone for its key removes it again.
import FuzzSupport
import PushCore

/// 9999-12-31T23:59:59Z.
let latestWritable: Int64 = 253_402_300_799

runFuzzer { bytes in
    let key: [UInt8]
    let value: [UInt8]?
    if let nul = bytes.firstIndex(of: 0) {
        key = Array(bytes[..<nul])
        value = Array(bytes[(nul + 1)...])
    } else {
        key = bytes
        value = nil
    }
    let tombstone: SuppressionEntry?
    do throws(SuppressionRecordError) {
        tombstone = try SuppressionEntry(key: key, value: nil)
    } catch {
        precondition(error.description.unicodeScalars.count <= 300, "an error names too much of the record")
        tombstone = nil
    }
    guard let value else { return }
    let entry: SuppressionEntry
    do throws(SuppressionRecordError) {
        entry = try SuppressionEntry(key: key, value: value)
    } catch {
        precondition(error.description.unicodeScalars.count <= 300, "an error names too much of the record")
        return
    }
    guard let tombstone else { preconditionFailure("a record was read from a key that is no tombstone's") }
    guard case .suppress(let record) = entry else { preconditionFailure("a record with a value was read as a tombstone") }
    precondition(tombstone == .lift(record.tableKey), "the record is about another token than its key")
    if (0...latestWritable).contains(record.invalidatedAt) {
        let again = try? SuppressionEntry(key: record.key, value: record.json())
        precondition(again == entry, "the record changed when written again")
    }
    var table = SuppressionTable()
    table.apply(entry)
    guard let found = table.lookup(record.tableKey) else { preconditionFailure("the table lost the record") }
    precondition(found.reason == record.reason, "the table changed the reason")
    precondition(found.invalidatedAt == Int64(UInt32(clamping: record.invalidatedAt)), "the table changed the time")
    table.apply(tombstone)
    precondition(table.lookup(record.tableKey) == nil && table.count == 0, "the tombstone did not lift the record")
}
