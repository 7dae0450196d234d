# syntax=docker/dockerfile:1
# Build: the Swift toolchain image plus libzmq's and OpenSSL's headers.
#
# The build context is the whole package, filtered by .dockerignore (no .build, no .git, no docs):
# SwiftPM checks every target's directory named in Package.swift (tests included) before it resolves,
# so copying "only what the manifest needs" by hand broke each time a target was added. The caches
# (BuildKit mounts) keep dependencies and objects between builds instead of a resolve-only layer.
# `make test` replays the COPY and RUN steps of this stage in a scratch directory
# (Tests/Fleet/docker_replay.py), so a change that breaks them fails there, not on a user's machine.
FROM swift:6.2-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends libzmq3-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The flags of `make release` (the Makefile says why cross-module optimization).
RUN --mount=type=cache,target=/src/.build \
    swift build -c release --static-swift-stdlib -Xswiftc -cross-module-optimization --product skynet \
    && cp "$(swift build -c release --static-swift-stdlib -Xswiftc -cross-module-optimization --show-bin-path)/skynet" \
        /usr/local/bin/skynet

# Run: Debian with libzmq5 only; the Swift runtime is linked statically.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends libzmq5 libssl3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home skynet
COPY --from=build /usr/local/bin/skynet /usr/local/bin/skynet
USER skynet
EXPOSE 5555 5556 8787 5670/udp
ENTRYPOINT ["skynet"]
CMD ["--help"]
