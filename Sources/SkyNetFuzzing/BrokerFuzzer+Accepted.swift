import SkyNetCore

// What the fuzzer checks of the held ACCEPTEDs the machine lets go (``BrokerMachine/Effect/accepted(_:list:)``).
extension BrokerFuzzer {
    /// One coordinator's run, not a detached job's; a list only to a coordinator that reads lists, of
    /// 2 to ``ProtocolLimits/acceptedListMost``, and such a coordinator's others one at a time; and a
    /// list written as the broker writes it reads back the same.
    /// `readsLists`: whether the machine says the run's coordinator reads lists.
    static func checkAccepted(_ held: [BrokerMachine.HeldAccepted], list: Bool, readsLists: Bool) {
        guard let coordinator = held.first?.coordinator else { preconditionFailure("an empty run of ACCEPTEDs") }
        precondition(held.allSatisfy { $0.coordinator == coordinator }, "a run of ACCEPTEDs for two coordinators")
        precondition(coordinator.job == nil, "an ACCEPTED for a detached job")
        if readsLists {
            precondition(list == (held.count > 1), "a coordinator that reads lists got a run of singles")
            precondition(held.count <= ProtocolLimits.acceptedListMost, "an ACCEPTED list over its limit")
        } else {
            precondition(!list, "an ACCEPTED list for a coordinator that does not read them")
        }
        if list { Self.checkAcceptedList(held.map { AcceptedTask($0.id, attempt: $0.attempt) }) }
    }

    /// Held ACCEPTEDs written as the broker sends them to a coordinator that reads lists read back the
    /// same, in place and decoded.
    static func checkAcceptedList(_ tasks: [AcceptedTask]) {
        guard tasks.count >= 2 else { return }
        var writer = Batch.Writer()
        writer.appendAcceptedList(count: tasks.count) { tasks[$0] }
        var read: [AcceptedTask] = []
        var decoded: WireMessage?
        writer.withUnsafeBytes { bytes in
            try? Batch.forEach(bytes, count: 1) { packed in
                packed.withFrames { frames in
                    if let view = try? AcceptedView(frames) {
                        view.forEach { read.append(AcceptedTask($0, attempt: $1)) }
                    }
                    decoded = try? WireMessage.decode(frames)
                }
            }
        }
        precondition(read == tasks, "an ACCEPTED list read in place is not what was written")
        precondition(decoded == .acceptedList(tasks), "an ACCEPTED list decoded is not what was written")
        precondition(
            WireMessage.acceptedList(tasks).encode() == [
                Header(.accepted, flags: Header.acceptedListFlag, attempt: tasks[0].attempt, taskID: tasks[0].id)
                    .encode(),
                Array(writer.bytes[(1 + 4 + Header.size + 4)...]),
            ],
            "an ACCEPTED list encoded differs from one written into a BATCH"
        )
    }
}
