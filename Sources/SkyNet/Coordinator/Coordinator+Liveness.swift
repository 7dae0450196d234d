import SkyNetCore
import Logging
import ZeroMQ

// Whether the broker is there: no answer within the connect timeout fails the job; silence past the
// broker timeout hands unfinished remote attempts to the retry policy; a restarted broker (a new
// epoch) or one that forgot this coordinator gets the unfinished tasks again.
extension Coordinator {
    func checkConnected() {
        guard !self.liveness.answered, let job = self.job else { return }
        // Members of a group that answer "not the leader" are there: the wait is for one to lead,
        // bounded by the broker timeout (heartbeatTick).
        guard self.leaderlessSince == nil else { return }
        self.job = nil
        Self.end(
            job,
            throwing: CoordinatorError.unreachable(self.configuration.broker, within: self.configuration.connectTimeout)
        )
    }

    func heartbeatTick() {
        self.send(.heartbeat(epoch: 0))
        if let job = self.job {
            self.report(job, summary: self.summary)
            if job.throttled, job.ledger.unanswered == 0, job.credits == 0, job.heldHead < job.held.count {
                // Held back with nothing of ours at the broker to free room (its queue is full of
                // others' tasks): try one again each heartbeat.
                job.credits = 1
                self.sendMore()
            }
            if !job.kindsChecked, ContinuousClock.now - job.start >= .seconds(1) {
                job.kindsChecked = true
                Task { await self.checkKinds(of: job) }
            }
        }
        let now = ContinuousClock.now
        if self.brokers.isGroup, self.liveness.silent(now: now) > self.configuration.heartbeat.expiry {
            // A member of a group that goes silent for a heartbeat's expiry is left for the next:
            // waiting out the whole broker timeout would be most of a failover's time.
            self.switchBroker(
                because:
                    "no word from the broker at \(self.brokers.current) for \(DurationParser.format(self.configuration.heartbeat.expiry))"
            )
        } else if let since = self.leaderlessSince, now - since > self.configuration.brokerTimeout {
            self.leaderlessSince = nil
            self.brokerLost(
                "no broker of \(self.brokers.endpoints.joined(separator: ",")) led for \(DurationParser.format(self.configuration.brokerTimeout))"
            )
        } else if self.liveness.isLost(now: now) {
            self.brokerLost("no word from the broker for \(DurationParser.format(self.liveness.timeout))")
        }
    }

    /// A broker answered as one (not "not the leader").
    func leaderAnswered() {
        self.switched = false
        if self.leaderlessSince != nil {
            self.leaderlessSince = nil
            self.logger.notice("the broker at \(self.brokers.current) leads; continuing there")
        }
    }

    /// A member of an HA group that does not lead answered: go where it says the leader is, or stay
    /// (it answers as the leader once it has won; each heartbeat asks again).
    func notLeader(hint: String) {
        self.leaderlessSince = self.leaderlessSince ?? .now
        // What was sent to it was not taken: it goes again to whichever member answers as the leader.
        self.switched = true
        let from = self.brokers.current
        if let next = self.brokers.notLeader(hint: hint, now: .now) {
            self.logger.notice("the broker at \(from) does not lead; switching to \(next)")
            self.reconnect()
        } else if !self.brokers.isGroup {
            self.standbyLog.log(
                self.logger,
                level: .warning,
                "the broker at \(self.brokers.current) is a standby of an HA group\(hint.isEmpty ? "" : " (the leader is \(hint))"): give every member (--broker tcp://a:5555,tcp://b:5555)"
            )
        }
    }

    /// Leaves the member in use for the next (it went silent, or stopped).
    func switchBroker(because reason: String) {
        self.leaderlessSince = self.leaderlessSince ?? .now
        let from = self.brokers.current
        _ = self.brokers.silent(now: .now)
        self.logger.warning("\(reason); trying \(self.brokers.current)", metadata: ["from": "\(from)"])
        self.reconnect()
    }

    /// Connects to the member of ``brokers`` in use.
    func open() throws(CoordinatorError) {
        self.connection = try DealerConnection.client(
            reactor: self.reactor,
            broker: self.brokers.current,
            id: self.id,
            security: self.configuration.security,
            logger: self.logger,
            onReadable: { self.drain() },  // isolated to this actor: see Broker.start()
            onFailure: { self.refused($0.message) }
        )
        self.liveness.connected(now: .now)
    }

    /// Closes the connection and opens one to ``brokers``' current member; what is unfinished goes
    /// again once it answers.
    private func reconnect() {
        self.connection?.close()
        self.connection = nil
        self.switched = true
        do throws(CoordinatorError) {
            try self.open()
            self.send(.heartbeat(epoch: 0))
        } catch {
            self.logger.error("cannot connect", metadata: ["error": "\(error)"])
        }
    }

    /// A job that has run a second: says (a log line at info, and ``CoordinatorEvent/noWorker(kind:)``) which
    /// of its kinds no registered worker serves, since those tasks wait at the broker until one
    /// comes. Asked once a job, with a heartbeat, so a job that is done sooner costs nothing.
    func checkKinds(of job: Job) async {
        // Hashed only when it differs from the task before (a job's tasks are mostly of one kind):
        // a hash per task cost ~470 instructions per task of a big job. Compared as a String, not
        // an optional one: that comparison was not inlined (~65 a task).
        guard let first = job.ledger.tasks.first else { return }
        var kinds: Set<String> = [first.kind]
        var last = first.kind
        for task in job.ledger.tasks where task.kind != last {
            kinds.insert(task.kind)
            last = task.kind
            if kinds.count >= ProtocolLimits.kindsPerWorker { break }
        }
        guard let status = await self.brokerStatus(timeout: .seconds(2)), self.job === job else { return }
        let served = Set(status.workers.flatMap(\.kinds))
        let missing = kinds.subtracting(served).sorted()
        guard !missing.isEmpty else { return }
        for kind in missing {
            let hint = kind == ExecScanner.kind ? " (workers run commands only when started with --allow-command)" : ""
            self.logger.info("no worker serves \"\(kind)\" yet\(hint); its tasks wait at the broker for one")
            job.pending.append(.noWorker(kind: kind))
        }
        self.flushEvents()
    }

    /// Tells the broker how `job` is going (FIGURES), for its dashboard.
    func report(_ job: Job, summary: JobSummary) {
        let name = self.configuration.jobName ?? "\(Self.programName) job \(job.serial)"
        self.send(.jobFigures(JobFigures(serial: job.serial, name: name, summary: summary)))
        job.reported = true
    }

    /// This program's file name.
    static let programName = CommandLine.arguments.first.map { String($0.split(separator: "/").last ?? "") } ?? "swift"

    /// The broker is gone: unfinished remote attempts count as failed, so the retry policy decides
    /// (locally re-run by default) and the job cannot hang.
    func brokerLost(_ reason: String) {
        guard let job = self.job, !job.brokerLost else { return }
        job.lostBecause = reason
        job.pending.append(.brokerLost(reason: reason))
        self.logger.warning("broker lost", metadata: ["reason": "\(reason)"])
        self.failRemote(of: job)
    }

    /// ``sendMore()`` while the broker is lost: tasks added since (an open job's, a chain's next) go
    /// to the retry policy as the job's others did (``failRemote(of:)``), not to a broker that may
    /// not come back; in a turn of their own, since a task ending here could start a chain's next one
    /// inside this call, and that the next, down the stack. Sent as usual if the broker is back by
    /// then.
    func handOverUnsent(of job: Job) {
        guard job.nextToSend < job.ledger.tasks.count, !job.handingOver else { return }
        job.handingOver = true
        _ = self.reactor.schedule(after: .zero) { [weak self] in
            self?.assumeIsolated { coordinator in
                guard let job = coordinator.job, job.handingOver else { return }
                job.handingOver = false
                // The broker may have come back meanwhile (``resendUnfinished(reason:)``).
                if job.brokerLost { coordinator.failRemote(of: job) } else { coordinator.sendMore() }
            }
        }
    }

    /// Hands each unfinished attempt of `job` that is not local (at the broker, or not sent yet) to
    /// the retry policy as failed, the broker being lost (``brokerLost(_:)``). Also for tasks added
    /// to the job since (an open job's, a chain's next), which ``sendMore()`` does not send to a
    /// lost broker but leaves to this, a turn later.
    func failRemote(of job: Job) {
        for (id, attempt) in job.ledger.unfinishedRemote {
            let outcome = ScanOutcome.failed("broker lost: \(job.lostBecause ?? "")")
            self.apply(
                job.ledger.record(id, attempt: attempt, outcome: outcome, system: "broker", remoteAllowed: false),
                id: id,
                attempt: attempt,
                system: "broker",
                outcome: outcome
            )
        }
        self.flushEvents()
    }

    /// The broker came back as a new process: whatever it held in memory is gone (a durable broker
    /// recovers its journal, and answers a resend of a task it has with ACCEPTED again). Send every
    /// unfinished remote task again, at its current attempt; remote retries are allowed again.
    func brokerRestarted() {
        self.resendUnfinished(reason: "the broker restarted")
    }

    func resendUnfinished(reason: String) {
        guard let job = self.job, !job.ledger.cancelling else { return }
        // A retry still waiting out its backoff goes when its timer fires, not now.
        let tasks = job.ledger.unfinishedRemoteTasks.filter { self.delayedRetries[$0.id] == nil }
        job.lostBecause = nil
        job.pending.append(.resubmitted(count: tasks.count, reason: reason))
        self.logger.warning("resending unfinished tasks", metadata: ["tasks": "\(tasks.count)", "reason": "\(reason)"])
        for task in tasks {
            self.send(.submit(task.id, attempt: task.attempt, task.envelope, input: task.input))
        }
    }
}
