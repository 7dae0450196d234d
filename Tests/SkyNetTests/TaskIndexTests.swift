import Testing

@testable import SkyNetCore

@Suite("The task table's index")
struct TaskIndexTests {
    @Test("agrees with a Dictionary over random inserts, updates and removals, through growth and emptying")
    func model() {
        // Deterministic (ProtocolTests' SplitMix64), so a failure repeats.
        var generator = SplitMix64(seed: 28)
        var index = TaskIndex()
        var model: [TaskID: UInt32] = [:]
        // Few distinct ids, so the same ones come back (removed, then mapped again) and runs of
        // buckets collide; some share a half, as numbered ids do.
        let pool = (0..<600).map { n -> TaskID in
            n % 3 == 0 ? TaskID(high: 7, low: UInt64(n)) : TaskID.random(using: &generator)
        }
        for step in 0..<60_000 {
            let id = pool[Int(generator.next() % UInt64(pool.count))]
            switch generator.next() % 10 {
            case 0..<5:
                let slot = UInt32(truncatingIfNeeded: generator.next() % 1_000_000)
                index.set(id, to: slot)
                model[id] = slot
            case 5..<9:
                #expect(index.remove(id) == model.removeValue(forKey: id))
            default:
                if step % 7 == 0 {
                    index.removeAll(keepingCapacity: step % 2 == 0)
                    model.removeAll()
                }
            }
            #expect(index.count == model.count)
            if step % 500 == 0 {
                for probe in pool { #expect(index.slot(of: probe) == model[probe]) }
            }
        }
        for probe in pool { #expect(index.slot(of: probe) == model[probe]) }
    }

    @Test("an empty index finds nothing and removes nothing; the zero id is an id like another")
    func empty() {
        var index = TaskIndex()
        #expect(index.slot(of: .zero) == nil && index.remove(.zero) == nil && index.isEmpty)
        index.set(.zero, to: 0)
        #expect(index.slot(of: .zero) == 0 && index.count == 1)
        index.removeAll(keepingCapacity: true)
        #expect(index.slot(of: .zero) == nil && index.isEmpty)
    }
}

@Suite("The task table's slot hints")
struct SlotHintTests {
    func entry(_ low: UInt64, ticket: UInt64) -> BrokerState.TaskEntry {
        BrokerState.TaskEntry(
            id: TaskID(high: 0, low: low),
            coordinator: PeerID(Array("c".utf8)),
            envelope: TaskEnvelope(kind: "k"),
            input: [],
            attempt: 1,
            queuedAt: 0,
            worker: nil,
            ticket: ticket
        )
    }

    @Test(
        "a hint is taken only while its slot holds that task: a stale, vacant, reused or distant slot falls back to the index"
    )
    func hints() throws {
        var table = TaskTable()
        let a = TaskID(high: 0, low: 1)
        let b = TaskID(high: 0, low: 2)
        let c = TaskID(high: 0, low: 3)
        let slotA = table.add(self.entry(1, ticket: 1))
        let slotB = table.add(self.entry(2, ticket: 2))
        #expect(table.slot(of: a, hint: SlotHint(slotA)) == slotA)
        // The wrong slot, and one past the end: found through the index all the same.
        #expect(table.slot(of: a, hint: SlotHint(slotB)) == slotA)
        #expect(table.slot(of: a, hint: SlotHint(1_000)) == slotA && table.slot(of: a, hint: .none) == slotA)
        // a ends: its slot is vacant, then holds c; a's hint finds neither.
        _ = table.remove(a)
        #expect(table.slot(of: a, hint: SlotHint(slotA)) == nil)
        #expect(table.coordinator(of: a, hint: SlotHint(slotA)) == nil)
        let slotC = table.add(self.entry(3, ticket: 3))
        #expect(slotC == slotA, "the freed slot is reused")
        #expect(table.slot(of: a, hint: SlotHint(slotA)) == nil && table.slot(of: c, hint: SlotHint(slotA)) == slotC)
        // A live entry with ticket 0 (never made by the broker) is found through the index, not the hint.
        _ = table.remove(b)
        let zero = table.add(self.entry(2, ticket: 0))
        #expect(table.slot(of: b, hint: SlotHint(zero)) == zero)
        var read: [UInt64] = []
        #expect(table.visitEntry(c, hint: SlotHint(slotB)) { read.append($0.pointee.ticket) })
        #expect(table.withEntry(c, hint: SlotHint(slotC)) { $0.ticket } == 3 && read == [3])
        // Hints never make effects differ.
        #expect(SlotHint(1) == SlotHint(2) && SlotHint.none == SlotHint(0))
    }
}
