import Testing

@testable import SkyNetCore

@Suite("A kind's task queue")
struct TaskQueueTests {
    let a = PeerID(Array("c-a".utf8))
    let b = PeerID(Array("c-b".utf8))
    let c = PeerID(Array("c-c".utf8))

    private func item(_ n: Int) -> TaskQueue.Item { TaskQueue.Item(slot: UInt32(n), ticket: 1) }

    private func drain(_ queue: TaskQueue, live: (TaskQueue.Item) -> Bool = { _ in true }) -> [UInt64] {
        var order: [UInt64] = []
        while let next = queue.popFirst(where: live) { order.append(UInt64(next.slot)) }
        return order
    }

    @Test("round robin between coordinators, each first in first out; higher priority first")
    func order() {
        let queue = TaskQueue(kind: "sector", figures: KindFigures())
        for n in 1...3 { queue.append(self.item(n), priority: 0, owner: self.a) }
        for n in 11...12 { queue.append(self.item(n), priority: 0, owner: self.b) }
        queue.append(self.item(21), priority: 5, owner: self.c)
        queue.append(self.item(4), priority: 0, owner: self.a)
        #expect(queue.count == 7 && queue.live == 7)
        #expect(self.drain(queue) == [21, 1, 11, 2, 12, 3, 4])
        #expect(queue.isEmpty && queue.live == 0)
    }

    @Test("a requeued task goes first in its lane; dead items are skipped and counted out")
    func prependAndDead() {
        let queue = TaskQueue(kind: "sector", figures: KindFigures())
        for n in 1...4 { queue.append(self.item(n), priority: 0, owner: self.a) }
        queue.prepend(self.item(9), priority: 0, owner: self.a)
        queue.forget()  // item 2 was cancelled
        #expect(queue.live == 4 && queue.count == 5)
        #expect(self.drain(queue) { $0.slot != 2 } == [9, 1, 3, 4])
        #expect(queue.count == 0 && queue.live == 0)
        // Nothing live: the dead are popped and nil comes back.
        queue.append(self.item(5), priority: 0, owner: self.a)
        queue.forget()
        #expect(queue.popFirst { _ in false } == nil)
        #expect(queue.isEmpty)
    }

    @Test("lanes that empty are reused; a coordinator that comes back joins the ring again")
    func laneReuse() {
        let queue = TaskQueue(kind: "sector", figures: KindFigures())
        for round in 0..<50 {
            let base = round * 10
            queue.append(self.item(base + 1), priority: 0, owner: self.a)
            queue.append(self.item(base + 2), priority: 0, owner: self.b)
            queue.append(self.item(base + 3), priority: Int32(round % 3), owner: self.c)
            queue.append(self.item(base + 4), priority: 0, owner: self.a)
            let order = self.drain(queue)
            #expect(order.count == 4)
            #expect(Set(order) == [UInt64(base + 1), UInt64(base + 2), UInt64(base + 3), UInt64(base + 4)])
            // a's two tasks keep their order.
            #expect(order.firstIndex(of: UInt64(base + 1))! < order.firstIndex(of: UInt64(base + 4))!)
        }
        var heads: [UInt64] = []
        for n in 1...5 { queue.append(self.item(n), priority: 0, owner: self.a) }
        queue.append(self.item(7), priority: 0, owner: self.b)
        queue.heads(perLane: 2) { heads.append(UInt64($0.slot)) }
        #expect(heads == [1, 2, 7])
    }
}

@Suite("A task's input as the broker keeps it")
struct TaskBytesTests {
    @Test("up to 22 bytes held in place, more in an array; the same bytes back either way, from an array or a frame")
    func inlineAndHeap() {
        for count in [0, 1, 20, 22, 23, 24, 25, 100, 70_000] {
            let bytes = (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            let fromArray = TaskBytes(bytes)
            let fromFrame = bytes.withUnsafeBytes { TaskBytes($0) }
            #expect(fromArray.count == count && fromFrame.count == count, "\(count)")
            #expect(fromArray.array == bytes && fromFrame.array == bytes, "\(count)")
            #expect(fromArray == fromFrame, "\(count)")
            #expect(fromArray.withUnsafeBytes { Array($0) } == bytes, "\(count)")
            #expect(fromArray.isEmpty == (count == 0))
            if case .inline = fromFrame {
                #expect(count <= TaskBytes.inlineCapacity, "\(count)")
            } else {
                #expect(count > TaskBytes.inlineCapacity, "\(count)")
            }
        }
        // A byte of difference, or of length, makes them unequal (the count byte is not data).
        #expect(TaskBytes([1, 2, 3]) != TaskBytes([1, 2, 4]))
        #expect(TaskBytes([1, 2, 3]) != TaskBytes([1, 2, 3, 0]))
        #expect(TaskBytes([]) == [])
        #expect(TaskBytes(Array(repeating: 5, count: 40)) != TaskBytes(Array(repeating: 5, count: 41)))
    }
}
