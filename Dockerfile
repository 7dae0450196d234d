# syntax=docker/dockerfile:1
# Build: the Swift toolchain image plus libzmq's headers.
FROM swift:6.2-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends libzmq3-dev libssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Resolve dependencies first so they are cached while only sources change.
COPY Package.swift ./
COPY CZMQ ./CZMQ
COPY COpenSSL ./COpenSSL
RUN mkdir -p Sources/ZeroMQ Sources/SkyNet Sources/SkyNetCLI Sources/skynet Sources/skynet-fuzz \
    && swift package resolve
COPY Sources ./Sources
RUN swift build -c release --static-swift-stdlib --product skynet \
    && cp "$(swift build -c release --show-bin-path)/skynet" /usr/local/bin/skynet

# Run: Debian with libzmq5 only; the Swift runtime is linked statically.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends libzmq5 libssl3 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home skynet
COPY --from=build /usr/local/bin/skynet /usr/local/bin/skynet
USER skynet
EXPOSE 5555 5556 8787
ENTRYPOINT ["skynet"]
CMD ["--help"]
