import Testing

@testable import SkyNetCore

@Suite("A worker's lease set")
struct LeaseSetTests {
    @Test("inserts, removals and lookups agree with Set<TaskID> through growth and long runs of removals")
    func agreesWithSet() {
        var generator = SplitMix64(seed: 28)
        // Few distinct ids, so that inserts meet ids already there and removals find them; the
        // zero id (a slot's filler) and numbered ids (one run, as `skynet submit` makes) included.
        let pool =
            [TaskID.zero] + (0..<40).map { TaskID(high: 7, low: $0) }
            + (0..<40).map { _ in TaskID.random(using: &generator) }
        var leases = LeaseSet()
        var reference = Set<TaskID>()
        for step in 0..<20_000 {
            let id = pool[Int(generator.next() % UInt64(pool.count))]
            // Two inserts for each removal while there are fewer than 30 ids, then removals.
            if generator.next() % 3 != 2 && reference.count < 30 {
                let inserted = leases.insert(id)
                #expect(inserted == reference.insert(id).inserted, "step \(step)")
            } else {
                let removed = leases.remove(id)
                #expect(removed == reference.remove(id), "step \(step)")
            }
            #expect(leases.count == reference.count)
            if step % 97 == 0 {
                #expect(Set(leases) == reference, "step \(step)")
                for probe in pool { #expect(leases.contains(probe) == reference.contains(probe)) }
            }
        }
        for id in reference { leases.remove(id) }
        #expect(leases.isEmpty && Array(leases).isEmpty)
    }

    @Test("a worker's whole lending at once: reserved room, every id found, emptied in any order")
    func fullTable() {
        var leases = LeaseSet()
        leases.reserveCapacity(256)
        let ids = (0..<256).map { TaskID(high: 1, low: UInt64($0) &* 0x9E37_79B9) }
        for id in ids {
            let inserted = leases.insert(id)
            #expect(inserted)
        }
        let again = leases.insert(ids[5])
        #expect(!again, "an id already there is not added twice")
        #expect(leases.count == 256 && ids.allSatisfy { leases.contains($0) })
        #expect(leases.sorted() == ids.sorted())
        for id in ids.reversed() where id.low % 2 == 0 {
            let removed = leases.remove(id)
            #expect(removed == id)
        }
        let gone = leases.remove(ids[0])
        #expect(gone == nil, "gone already")
        #expect(Set(leases) == Set(ids.filter { $0.low % 2 == 1 }))
        #expect(!leases.contains(TaskID(high: 2, low: 0)))
        let literal: LeaseSet = [ids[1], ids[1], ids[2]]
        #expect(literal.count == 2)
    }
}
