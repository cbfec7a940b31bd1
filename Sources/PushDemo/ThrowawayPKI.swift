import Crypto
import Foundation
import SwiftASN1
import X509

/// A throw-away test PKI made in process (no openssl needed): a CA, a server certificate for localhost and
/// 127.0.0.1, a client certificate for an app with Apple's subject form (`UID` = the bundle id), and a provider-token
/// signing key as Apple issues them (`AuthKey_KEY1234567.p8`, PKCS #8, for team TEAM123456) with its public half.
/// P-256 keys, valid from an hour ago for two days. For the demo and for trying the simulator: nothing here is
/// secret.
public enum ThrowawayPKI {
    /// The files it writes into a folder.
    public static let files = [
        "ca.pem", "server.pem", "server-key.pem", "app.pem", "app-key.pem", "AuthKey_KEY1234567.p8", "token-key.pub.pem",
    ]
    /// The team and key id of the signing key.
    public static let teamID = "TEAM123456"
    public static let keyID = "KEY1234567"

    /// Writes the files into `directory` (created if needed) for the app `app`.
    public static func make(in directory: String, app: String = "com.example.app", now: Date = Date()) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let notBefore = now.addingTimeInterval(-3600)
        let notAfter = now.addingTimeInterval(2 * 86400)

        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName {
            OrganizationName("pushworker demo")
            CommonName("pushworker throw-away CA")
        }
        let ca = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(caKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter, issuer: caName, subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(caKey))

        func issue(_ subject: DistinguishedName, _ usage: ExtendedKeyUsage.Usage, names: SubjectAlternativeNames?) throws
            -> (certificate: Certificate, key: P256.Signing.PrivateKey)
        {
            let key = P256.Signing.PrivateKey()
            let certificate = try Certificate(
                version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
                notValidBefore: notBefore, notValidAfter: notAfter, issuer: caName, subject: subject,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([usage])
                    if let names { names }
                },
                issuerPrivateKey: .init(caKey))
            return (certificate, key)
        }
        let server = try issue(
            try DistinguishedName { CommonName("localhost") }, .serverAuth,
            names: SubjectAlternativeNames([.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))]))
        let client = try issue(
            try DistinguishedName {
                CommonName("Apple Push Services: \(app)")
                UserID(app)
            }, .clientAuth, names: nil)

        func write(_ name: String, _ text: String, private: Bool = false) throws {
            let path = "\(directory)/\(name)"
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            if `private` { try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path) }
        }
        try write("ca.pem", try ca.serializeAsPEM().pemString + "\n")
        try write("server.pem", try server.certificate.serializeAsPEM().pemString + "\n")
        try write("server-key.pem", server.key.pemRepresentation + "\n", private: true)
        try write("app.pem", try client.certificate.serializeAsPEM().pemString + "\n")
        try write("app-key.pem", client.key.pemRepresentation + "\n", private: true)
        let tokenKey = P256.Signing.PrivateKey()
        try write("AuthKey_\(keyID).p8", tokenKey.pemRepresentation + "\n", private: true)
        try write("token-key.pub.pem", tokenKey.publicKey.pemRepresentation + "\n")
    }
}

/// The `UID` attribute (0.9.2342.19200300.100.1.1) Apple's push certificates carry the bundle id in.
struct UserID: RelativeDistinguishedNameConvertible {
    var value: String
    init(_ value: String) { self.value = value }

    func makeRDN() throws -> RelativeDistinguishedName {
        RelativeDistinguishedName(.init(type: [0, 9, 2342, 19_200_300, 100, 1, 1], value: .init(utf8String: value)))
    }
}
