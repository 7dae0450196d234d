extension String {
    /// The longest prefix of at most `limit` UTF-8 bytes that ends where a character's encoding ends
    /// (a wire field's limit never splits a character).
    package func prefix(utf8Bytes limit: Int) -> String {
        guard self.utf8.count > limit else { return self }
        let bytes = Array(self.utf8)
        var cut = limit
        while cut > 0 && bytes[cut] & 0xC0 == 0x80 { cut -= 1 }
        return String(decoding: bytes[..<cut], as: UTF8.self)
    }
}
