/// Waits for `condition` (checked as the task yields) for at most `limit`; false if it never held. For state that
/// offers nothing to await.
public func eventually(within limit: Duration = .seconds(60), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: limit)
    while !condition() {
        if ContinuousClock.now > deadline { return false }
        await Task.yield()
    }
    return true
}
