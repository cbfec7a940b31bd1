/// The events the benchmarks decode, shared by `CoreBenchmarks` and `DecodeLoop`.

/// A typical event: a 32-byte token and a ~200-byte payload with an alert dictionary, a badge, a sound and the
/// app's own data, written as a producer's JSON serializer writes it.
public let typicalEvent = Array("""
    {"id":"order-shipped-8d2f41c6-19b4-4c47-8d0b-6f3f0c2a9e17","app":"com.example.app","environment":"production",\
    "token":"740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad",\
    "payload":{"aps":{"alert":{"title":"Your order has shipped","body":"Order #48213 is on its way and arrives Tuesday."},\
    "badge":3,"sound":"default","category":"ORDER"},"order":{"id":48213,"carrier":"ups"}},\
    "expiration":1893456000,"priority":10}
    """.utf8)

/// The end-to-end benchmark's event (`scripts/e2e/harness.py`): four keys, a short id, and a payload that is mostly
/// one 220-byte string.
public let endToEndEvent = Array(("""
    {"id":"e123456","app":"com.example.app","token":"740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad",\
    "payload":{"aps":{"alert":"Event 123456","sound":"default"},"n":123456,"ts":1795784033989,"pad":"
    """ + String(repeating: "x", count: 220) + "\"}}").utf8)
