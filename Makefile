# SkyNet — the quick start is two commands:
#   make demo    a broker, 2 workers and a coordinator in one process, over ZeroMQ on loopback
#   make test    unit and integration tests (real processes on loopback)
# Both install libzmq3-dev and libssl-dev first when they are missing (as root, with apt-get).

SWIFT ?= swift
BUILD_FLAGS ?=
BIN := .build/debug/skynet

.PHONY: all deps build release dist fleet demo test unit integration chaos bench baseline instructions fuzz fuzz-build format lint clean

all: build

deps:
	@if [ ! -f /usr/include/zmq.h ] || [ ! -f /usr/include/openssl/ssl.h ]; then \
		echo "Installing libzmq3-dev and libssl-dev (needs root and apt-get)..."; \
		if [ "$$(id -u)" != 0 ]; then echo "error: libzmq3-dev or libssl-dev is missing; run 'sudo apt-get install -y libzmq3-dev libssl-dev'" >&2; exit 1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libzmq3-dev libssl-dev >/dev/null; \
	fi

build: deps
	$(SWIFT) build $(BUILD_FLAGS)

# Linked like the Docker image (the Swift runtime inside the binary): what is measured is what ships,
# and it measured about 5% faster than the dynamically linked build (likely: no PLT calls or dynamic
# TLS lookups into the runtime's shared libraries). The static link prints one warning, from the
# toolchain's own libFoundationEssentials.a ("the use of `mktemp' is dangerous"): not SkyNet's code.
#
# With cross-module optimization: the hot path crosses from SkyNet into SkyNetCore (the codec, the
# broker's machine, the retry ledger) for every task, and without it each such call is an opaque call
# to an unspecialized body. Measured on the deep-credit workload: 19,219 / 19,227 → 18,789 / 18,847
# instructions a task (docs/DESIGN.md §3, twelfth round). Here and in the Dockerfile, not in
# Package.swift: a package with unsafe flags cannot be a versioned dependency of others'.
RELEASE_FLAGS := -Xswiftc -cross-module-optimization
release: deps
	$(SWIFT) build -c release --static-swift-stdlib $(RELEASE_FLAGS) $(BUILD_FLAGS)

demo: build
	$(BIN) demo

test: deps
	$(SWIFT) build --build-tests $(BUILD_FLAGS)
	$(SWIFT) build --package-path Examples/SkyMap $(BUILD_FLAGS)
	# Under a TMPDIR of the run's own, removed when it ends (Tests/in-own-tmpdir.sh).
	SKYNET_BIN=$(abspath $(BIN)) SKYMAP_BIN=$(abspath Examples/SkyMap/.build/debug/skymap) \
		Tests/in-own-tmpdir.sh $(SWIFT) test --skip-build $(BUILD_FLAGS)
	$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=30
	# The release build `make bench` and `make instructions` use: it once failed where the debug
	# build passed (member import visibility in release only).
	$(MAKE) --no-print-directory release
	# Allocations per task on the hot paths, counted (not timed) in the release build: over budget fails.
	python3 bench/allocations.py --check
	# Where fleets run: the Debian package, the Kubernetes manifests, the Dockerfile.
	$(MAKE) --no-print-directory fleet

# The Debian package and a tarball of the release build, in dist/ (deploy/debian/build.sh).
dist: release
	deploy/debian/build.sh

# The fleet checks (also the end of `make test`): the package installed with dpkg, its units verified,
# a broker and two workers run from them on two network namespaces, then purged (root); the
# Kubernetes overlays rendered and validated offline, KEDA's query checked with promtool against a
# real broker; and the Dockerfile's build stage replayed in a scratch directory (root).
fleet: dist
	python3 Tests/Fleet/package_test.py
	python3 Tests/Fleet/kubernetes_test.py
	python3 Tests/Fleet/docker_replay.py

unit: deps
	Tests/in-own-tmpdir.sh $(SWIFT) test --skip IntegrationTests $(BUILD_FLAGS)

integration: deps
	$(SWIFT) build --build-tests $(BUILD_FLAGS)
	$(SWIFT) build --package-path Examples/SkyMap $(BUILD_FLAGS)
	SKYNET_BIN=$(abspath $(BIN)) SKYMAP_BIN=$(abspath Examples/SkyMap/.build/debug/skymap) \
		Tests/in-own-tmpdir.sh $(SWIFT) test --skip-build --filter IntegrationTests $(BUILD_FLAGS)

# The chaos suite (also part of `make test`): 10,000 tasks (SKYNET_CHAOS_TASKS) on 4 workers, a worker
# SIGKILLed every 2 s, the durable broker SIGKILLed once; and, as root, the across-hosts link cut.
chaos: deps
	$(SWIFT) build --build-tests $(BUILD_FLAGS)
	SKYNET_CHAOS_TASKS=$${SKYNET_CHAOS_TASKS:-10000} SKYNET_BIN=$(abspath $(BIN)) \
		Tests/in-own-tmpdir.sh $(SWIFT) test --skip-build --filter 'chaos|acrossHosts' $(BUILD_FLAGS)

# Benchmarks (not part of `make test`: too noisy for CI). The C baseline is built with the system's cc
# against the same libzmq; `make bench` runs it and `skynet bench` alternately and prints the medians.
baseline: deps
	mkdir -p .build/baseline
	for program in broker worker client ceiling batched; do \
		cc -O2 -Wall -Wextra -o .build/baseline/$$program bench/baseline/$$program.c -lzmq || exit 1; \
	done

bench: release baseline
	python3 bench/run.py $(BENCH_FLAGS)

# Instructions per latency round trip, by thread, and per task with deep credit (1 worker x 64 slots
# through `skynet submit`, by process), for SkyNet and the C baseline, under valgrind's callgrind:
# counts that do not drift with the machine's load (about two minutes; needs valgrind).
instructions: release baseline
	@command -v valgrind >/dev/null || { echo "error: valgrind is missing (apt-get install -y valgrind)" >&2; exit 1; }
	python3 bench/instructions.py $(INSTRUCTIONS_FLAGS)
	python3 bench/deep_instructions.py $(DEEP_INSTRUCTIONS_FLAGS)

# libFuzzer on the broker's decoder and machine (Sources/SkyNetFuzzing/BrokerFuzzer.swift),
# built with -sanitize=fuzzer,address in its own scratch folder. FUZZ_MINUTES (default 10), or
# FUZZ_SECONDS for short passes (`make test` runs 30 s). Inputs that crash land in
# .build-fuzz/artifacts/; copy each into Fuzz/regressions/ (the tests replay it) once it is fixed.
# The link prints ld.gold's "Cannot export local symbol '__asan_…'" warnings: they come from the
# toolchain's AddressSanitizer runtime, not SkyNet's code.
FUZZ_MINUTES ?= 10
FUZZ_SECONDS ?= $(shell expr $(FUZZ_MINUTES) \* 60)
FUZZ_BUILD := .build-fuzz
fuzz-build: deps
	$(SWIFT) build --product skynet-fuzz --scratch-path $(FUZZ_BUILD) -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING

fuzz: fuzz-build
	mkdir -p $(FUZZ_BUILD)/corpus $(FUZZ_BUILD)/artifacts
	SWIFT_BACKTRACE=enable=no $(FUZZ_BUILD)/debug/skynet-fuzz -max_total_time=$(FUZZ_SECONDS) \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/ $(FUZZ_BUILD)/corpus Fuzz/corpus Fuzz/regressions

format:
	$(SWIFT) format format --in-place --recursive Package.swift Sources Tests

lint:
	$(SWIFT) format lint --strict --recursive Package.swift Sources Tests

clean:
	rm -rf .build $(FUZZ_BUILD)
