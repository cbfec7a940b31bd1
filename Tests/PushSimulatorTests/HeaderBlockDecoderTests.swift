import NIOCore
import NIOHPACK
import Testing
@testable import PushSimulator

/// The simulator's HPACK decoder against swift-nio-http2's encoder and decoder (written independently of it).
struct HeaderBlockDecoderTests {
    private static func block(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

    private static func fields(_ headers: HPACKHeaders) -> [String] {
        headers.map { "\($0.name): \($0.value) \($0.indexable)" }
    }

    private static func fields(_ headers: HeaderList) -> [String] {
        headers.map { "\($0.name): \($0.value) \($0.indexing)" }
    }

    @Test func theStaticTableIsRFC7541s() throws {
        var reference = HPACKDecoder(allocator: ByteBufferAllocator())
        var decoder = HeaderBlockDecoder()
        #expect(HeaderBlockDecoder.staticTable.count == 61)
        for index in 1...61 {
            var bytes = Self.block([0x80 | UInt8(index)])
            #expect(try Self.fields(decoder.decode(bytes)) == Self.fields(reference.decodeHeaders(from: &bytes)))
        }
    }

    /// Every byte value of every state: strings of all printable ASCII and of multi-byte UTF-8, Huffman-coded by
    /// NIOHPACK's encoder, come back exactly.
    @Test func huffmanCodedStringsComeBack() throws {
        var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: true)
        var decoder = HeaderBlockDecoder()
        let ascii = String(decoding: (0x20...0x7E).map { UInt8($0) }, as: UTF8.self)
        var values = [ascii, String(ascii.reversed()), "", "a", "é漢字🙂\u{7F}\u{1}\t", "bearer " + String(repeating: "eyJhbGci0", count: 20)]
        var random = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let scalars = (0..<Int.random(in: 0...40, using: &random)).map { _ in
                Unicode.Scalar(UInt8.random(in: 0...0x7F, using: &random))
            }
            values.append(String(String.UnicodeScalarView(scalars)) + (Bool.random(using: &random) ? "ü" : ""))
        }
        for value in values {
            var bytes = ByteBuffer()
            try encoder.encode(headers: HPACKHeaders([("x-value", value)].map { ($0.0, $0.1) }), to: &bytes)
            let decoded = try decoder.decode(bytes)
            #expect(decoded.first?.value == value, "\(value.debugDescription)")
        }
    }

    /// Random header lists through many blocks of one connection (the dynamic table filling, evicting and resized),
    /// with Huffman coding on and off and every indexing: the same headers as NIOHPACK's decoder reads, block by block.
    @Test func randomBlocksDecodeAsNIOHPACKDecodesThem() throws {
        var random = SystemRandomNumberGenerator()
        for huffman in [true, false] {
            var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: huffman)
            var reference = HPACKDecoder(allocator: ByteBufferAllocator())
            var decoder = HeaderBlockDecoder()
            var mostEntries = 0
            let names = [":method", ":path", "apns-topic", "authorization", "apns-id", "x-custom", "content-length", "accept"]
            for round in 0..<400 {
                if round % 97 == 50 { try encoder.setDynamicTableSize([0, 256, 1024, 4096].randomElement(using: &random)!) }
                var headers = HPACKHeaders()
                for _ in 0..<Int.random(in: 1...12, using: &random) {
                    let name = names.randomElement(using: &random)!
                    let value = String(repeating: "v\(Int.random(in: 0...30, using: &random))", count: Int.random(in: 0...20, using: &random))
                    let indexing: HPACKIndexing = [.indexable, .nonIndexable, .neverIndexed].randomElement(using: &random)!
                    headers.add(name: name, value: value, indexing: indexing)
                }
                var bytes = ByteBuffer()
                try encoder.encode(headers: headers, to: &bytes)
                let ours = try decoder.decode(bytes)
                let theirs = try reference.decodeHeaders(from: &bytes)
                #expect(Self.fields(ours) == Self.fields(theirs), "round \(round)")
                mostEntries = max(mostEntries, decoder.dynamicEntries.count)
            }
            #expect(mostEntries > 10)
        }
    }

    @Test func malformedBlocksThrow() throws {
        let cases: [(String, [UInt8])] = [
            ("index 0", [0x80]),
            ("index past the static table with an empty dynamic one", [0xBE]),
            ("index past both tables", [0xFF, 0x40]),
            ("integer cut short", [0xFF]),
            ("integer beyond 2^28", [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F]),
            // Found by FuzzHTTP2Server: zero groups shifted past 63 bits made a length negative (a trap).
            ("integer of too many bytes", [0x00, 0x7F] + Array(repeating: 0x80, count: 9) + [0x01, 0x61]),
            ("name string past the end", [0x00, 0x05, 0x61]),
            ("value string missing", [0x00, 0x01, 0x61]),
            ("table size update over 4096", [0x3F, 0xE2, 0x1F]),
            ("table size update after a field", [0x82, 0x20]),
            ("Huffman padding of 8 bits", [0x00, 0x81, 0xFF, 0x01, 0x61]),
            ("Huffman padding not ones", [0x00, 0x81, 0x00, 0x01, 0x61]),  // "0" (00000) then 000
            ("Huffman EOS", [0x00, 0x84, 0xFF, 0xFF, 0xFF, 0xFF, 0x01, 0x61]),
        ]
        for (name, bytes) in cases {
            var decoder = HeaderBlockDecoder()
            #expect(throws: HeaderBlockDecoder.Failure.self, "\(name)") { try decoder.decode(Self.block(bytes)) }
        }
        var small = HeaderBlockDecoder(maxHeaderListSize: 100)
        #expect(throws: HeaderBlockDecoder.Failure.self) {
            try small.decode(Self.block([0x00, 0x01, 0x61, 0x50] + Array(repeating: 0x62, count: 80)))
        }
        var decoder = HeaderBlockDecoder()
        #expect(try decoder.decode(Self.block([0x20, 0x3F, 0xE1, 0x1F, 0x82])).first?.value == "GET")
    }

    /// An entry larger than the whole table empties it and is not added; one that fits evicts the oldest.
    @Test func theDynamicTableEvictsOldestFirst() throws {
        var decoder = HeaderBlockDecoder()
        func literal(_ name: String, _ value: String) -> [UInt8] {
            [0x40, UInt8(name.utf8.count)] + Array(name.utf8) + [0x7F] + encodedLength(value.utf8.count - 127) + Array(value.utf8)
        }
        func encodedLength(_ rest: Int) -> [UInt8] {
            var rest = rest, bytes: [UInt8] = []
            while rest >= 128 { bytes.append(UInt8(rest & 0x7F | 0x80)); rest >>= 7 }
            return bytes + [UInt8(rest)]
        }
        let big = String(repeating: "x", count: 2000)
        _ = try decoder.decode(Self.block(literal("a", big) + literal("b", big)))
        #expect(decoder.dynamicEntries.map(\.name) == ["b", "a"])
        _ = try decoder.decode(Self.block(literal("c", big)))
        #expect(decoder.dynamicEntries.map(\.name) == ["c", "b"])
        _ = try decoder.decode(Self.block(literal("d", String(repeating: "y", count: 5000))))
        #expect(decoder.dynamicEntries.isEmpty)
        // index 62 is now nothing
        #expect(throws: HeaderBlockDecoder.Failure.self) { try decoder.decode(Self.block([0xBE])) }
    }

    /// Random bytes never crash it; where NIOHPACK reads a block, it reads the same headers (a name that is not
    /// ASCII, which NIOHPACK passes on, reads as NUL here).
    @Test func randomBytesNeverCrashIt() {
        var random = SystemRandomNumberGenerator()
        var agreed = 0
        for _ in 0..<50_000 {
            let bytes = (0..<Int.random(in: 0...24, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            var decoder = HeaderBlockDecoder()
            var reference = HPACKDecoder(allocator: ByteBufferAllocator())
            var buffer = Self.block(bytes)
            let ours = try? decoder.decode(buffer)
            if let theirs = try? reference.decodeHeaders(from: &buffer) {
                let names = HPACKHeaders(theirs.map { ($0.name.utf8.allSatisfy { $0 < 0x80 } ? $0.name : "\u{0}", $0.value) })
                #expect(ours.map { $0.map { "\($0.name): \($0.value)" } } == names.map { "\($0.name): \($0.value)" }, "\(bytes)")
                agreed += 1
            }
        }
        #expect(agreed > 100)
    }

    /// Long never-indexed values are kept by their encoded bytes: a repeat reads the same, a value differing in its
    /// last byte or in its coding reads as itself, more values than are kept still read right.
    @Test func repeatedNeverIndexedValuesReadRight() throws {
        var decoder = HeaderBlockDecoder()
        func neverIndexed(_ value: String, huffman: Bool) throws -> String? {
            var encoder = HPACKEncoder(allocator: ByteBufferAllocator(), useHuffmanEncoding: huffman)
            var headers = HPACKHeaders()
            headers.add(name: "authorization", value: value, indexing: .neverIndexed)
            var bytes = ByteBuffer()
            try encoder.encode(headers: headers, to: &bytes)
            #expect(bytes.getInteger(at: bytes.readerIndex, as: UInt8.self)! & 0xF0 == 0x10)
            return try decoder.decode(bytes).first?.value
        }
        let token = "bearer " + String(repeating: "eyJhbGciOiJFUzI1NiJ9", count: 8)
        var values = [token, token, String(token.dropLast()) + "X", token]
        values += (0..<12).map { "bearer \($0 % 6)" + String(repeating: "k", count: 40) }
        for value in values {
            for huffman in [true, false, true] {
                #expect(try neverIndexed(value, huffman: huffman) == value)
            }
        }
        // Raw bytes that happen to be a Huffman-coded value's bytes are not that value.
        let raw = String(repeating: "\u{7F}", count: 40)
        #expect(try neverIndexed(raw, huffman: false) == raw)
    }

    /// A name that is not ASCII comes out as NUL (which the rules reject); octets that are not UTF-8 count in the
    /// table by their number, as the client counts them, so later indexes still name the client's entries.
    @Test func bytesThatAreNotUTF8KeepTheTableInStep() throws {
        var decoder = HeaderBlockDecoder()
        let name: [UInt8] = [0x40, 0x02, 0xC3, 0xA9, 0x01, 0x76]  // "é": "v", indexed
        let headers = try decoder.decode(Self.block(name))
        #expect(headers.first?.name == "\u{0}" && headers.first?.value == "v")
        var request = HeaderList([(":method", "POST"), (":scheme", "https"), (":path", "/")])
        request.append(contentsOf: headers)
        #expect(HeaderBlockRules.problem(inRequest: request) == .invalidName)
        func invalid(_ name: UInt8) -> [UInt8] {
            [0x40, 0x01, name, 0x7F] + [0xCE, 0x0E] + Array(repeating: 0xFF, count: 1_997)  // 127 + 1870 octets
        }
        _ = try decoder.decode(Self.block(invalid(0x61) + invalid(0x62)))
        // 35 + 2030 + 2030 bytes: all three fit in 4096 when counted as octets (not as 3-byte U+FFFD each).
        #expect(decoder.dynamicEntries.map(\.name) == ["b", "a", "\u{0}"])
        let again = try decoder.decode(Self.block([0xBE, 0xBF, 0xC0]))
        #expect(again.map(\.name) == ["b", "a", "\u{0}"])
    }
}
