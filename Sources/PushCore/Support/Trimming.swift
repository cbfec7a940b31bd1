extension StringProtocol {
    /// The text without the given characters at either end.
    public func trimming(_ characters: Set<Character>) -> String {
        var s = self[...]
        while let f = s.first, characters.contains(f) { s.removeFirst() }
        while let l = s.last, characters.contains(l) { s.removeLast() }
        return String(s)
    }
}
