import PushWorkerCLI
import Testing

@Suite struct AllocatorSettingsTests {
    @Test func glibcTakesTheTopPad() {
        #if canImport(Glibc)
        #expect(AllocatorSettings.apply(tunablesSet: false))
        #else
        #expect(!AllocatorSettings.apply(tunablesSet: false))
        #endif
    }

    @Test func anOperatorsTunablesAreLeftAlone() {
        #expect(!AllocatorSettings.apply(tunablesSet: true))
    }
}
