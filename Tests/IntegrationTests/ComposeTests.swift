import Foundation
import SkyNetCLI
import Testing

@Suite("docker-compose.yml and Dockerfile")
struct ComposeTests {
    @Test("the compose file parses and has a broker, a scalable worker and a one-shot submit")
    func composeFile() async throws {
        let root = SkynetBinary.packageRoot
        let script = """
            import sys, yaml
            doc = yaml.safe_load(open(sys.argv[1]))
            services = doc["services"]
            for name in ("broker", "worker", "submit"):
                assert name in services, "missing service " + name
            worker = services["worker"]
            assert "container_name" not in worker, "a worker with a fixed container_name cannot scale"
            assert "ports" not in worker, "a worker that publishes ports cannot scale"
            assert any("broker:5556" in str(part) for part in worker.get("command", [])), "worker must connect to broker:5556"
            submit = services["submit"]
            assert any("broker:5555" in str(part) for part in submit.get("command", [])), "submit must use broker:5555"
            assert submit.get("profiles"), "submit is a one-shot example behind a profile"
            # CURVE on: keys from a one-shot keygen service's volume, the broker with its allowlists,
            # clients with theirs.
            keygen = services["keygen"]
            assert "skynet keygen broker" in " ".join(keygen["command"]), "keygen makes the broker's key"
            broker = " ".join(services["broker"]["command"])
            for flag in ("--curve-secret=", "--allow-workers=", "--allow-coordinators="):
                assert flag in broker, "broker without " + flag
            assert services["broker"]["depends_on"]["keygen"]["condition"] == "service_completed_successfully"
            for name in ("worker", "submit"):
                env = services[name]["environment"]
                assert env["SKYNET_CURVE_SECRET"].endswith(".key_secret") and env["SKYNET_BROKER_KEY"].endswith("broker.key")
            assert "keys" in doc["volumes"]
            # Production: durable (journal on a named volume), a healthcheck, the dashboard on loopback
            # with a token, workers starting once the broker is healthy.
            broker_service = services["broker"]
            assert "--journal=/var/lib/skynet/broker.journal" in broker and "journal:/var/lib/skynet" in broker_service["volumes"]
            assert "journal" in doc["volumes"]
            assert "--http=0.0.0.0:8787" in broker and "127.0.0.1:8787:8787" in broker_service["ports"]
            assert "SKYNET_HTTP_TOKEN=" in " ".join(broker_service["entrypoint"]), "the HTTP endpoint needs its token"
            assert broker_service["healthcheck"]["test"][:3] == ["CMD", "skynet", "status"]
            assert services["worker"]["depends_on"]["broker"]["condition"] == "service_healthy"
            assert "http.token" in " ".join(keygen["command"])
            assert "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in services["prometheus"]["volumes"]
            # Profile "ha": three etcd members, two brokers on them, workers and a submit that follow.
            members = [name for name in services if name.startswith("etcd-")]
            assert len(members) == 3 and all(services[m]["profiles"] == ["ha"] for m in members)
            for name in ("ha-broker-a", "ha-broker-b"):
                command = " ".join(services[name]["command"])
                assert "--etcd=http://etcd-1:2379,http://etcd-2:2379,http://etcd-3:2379" in command, name
                assert "--journal" not in command and "--advertise=" + name in command, name
            assert services["ha-worker"]["environment"]["SKYNET_BROKER"] == "tcp://ha-broker-a:5556,tcp://ha-broker-b:5556"
            assert services["ha-submit"]["environment"]["SKYNET_BROKER"] == "tcp://ha-broker-a:5555,tcp://ha-broker-b:5555"
            print("ok")
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script, root.appendingPathComponent("docker-compose.yml").path]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        process.waitUntilExit()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(output)")
        #expect(output.contains("ok"))
    }

    @Test("deploy/prometheus.yml is accepted by promtool check config (with its token file there)")
    func prometheusConfig() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/promtool") else {
            if ProcessInfo.processInfo.environment["CI"] == "true" {
                Issue.record("promtool is missing (.ci/run installs Debian's prometheus package)")
            }
            return
        }
        let root = SkynetBinary.packageRoot
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("skynet-prom-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let token = directory.appendingPathComponent("http.token")
        try "0123456789abcdef".write(to: token, atomically: true, encoding: .utf8)
        let config = try String(contentsOf: root.appendingPathComponent("deploy/prometheus.yml"), encoding: .utf8)
        #expect(config.contains("credentials_file: /keys/http.token") && config.contains("broker:8787"))
        let local = directory.appendingPathComponent("prometheus.yml")
        try config.replacing("/keys/http.token", with: token.path).write(to: local, atomically: true, encoding: .utf8)
        let output = try runCommand("/usr/bin/promtool", ["check", "config", local.path])
        #expect(output.contains("SUCCESS"), "\(output)")
    }

    @Test("the Dockerfile is multi-stage with a libzmq5 runtime and a non-root user")
    func dockerfile() throws {
        let text = try String(
            contentsOf: SkynetBinary.packageRoot.appendingPathComponent("Dockerfile"),
            encoding: .utf8
        )
        let stages = text.split(separator: "\n").filter { $0.hasPrefix("FROM ") }
        #expect(stages.count >= 2)
        #expect(text.contains("libzmq3-dev"))
        #expect(text.contains("libzmq5"))
        #expect(text.contains("swift build -c release"))
        #expect(text.contains("USER "))
        #expect(text.contains("ENTRYPOINT [\"skynet\"]"))
    }
}
