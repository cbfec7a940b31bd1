import PushCore
import PushGateway
import PushSimulator
import PushTestSupport

extension SimulatorConfiguration {
    /// The simulator with the test PKI's server certificate and CA, nothing else set.
    static var testPKI: SimulatorConfiguration {
        SimulatorConfiguration(
            certificatePath: TestPKI.path("server.pem"), privateKeyPath: TestPKI.path("server-key.pem"), caPath: TestPKI.path("ca.pem"))
    }
}

extension AppEndpoint {
    /// `com.example.app` in production over the binary interface to a local simulator, with the test PKI's client
    /// certificate.
    static func testBinary(gatewayPort: Int, feedbackPort: Int, environment: APNsEnvironment = .production, app: String = "com.example.app") -> AppEndpoint {
        AppEndpoint(
            app: app, environment: environment, gatewayHost: "127.0.0.1", gatewayPort: gatewayPort,
            feedbackHost: "127.0.0.1", feedbackPort: feedbackPort, connections: 1, format: .frame,
            certificatePath: TestPKI.path("app.pem"), privateKeyPath: TestPKI.path("app-key.pem"), caPath: TestPKI.path("ca.pem"))
    }
}
