import NIOCore

extension ByteBuffer {
    /// After a read's whole frames were taken: keeps only the unread bytes (an incomplete frame), so a connection's
    /// input holds at most one frame and one read however the peer splits its writes. An empty buffer lets go of
    /// its storage, which may be the channel's read buffer.
    public mutating func keepOnlyUnread() {
        if readableBytes == 0 {
            self = ByteBuffer()
        } else if readerIndex > 0 {
            discardReadBytes()
        }
    }
}
