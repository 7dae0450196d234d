#!/usr/bin/env bash
# Renders the sky in one process, then on 1, 2 and 4 worker processes (1 slot each), and checks that
# every picture is byte-identical to the single-process one. Needs a built `skynet` (the broker) and
# `skymap`: run it from Examples/SkyMap after `swift build -c release` here and in the repository root.
set -euo pipefail
SKYNET=${SKYNET:-../../.build/release/skynet}
SKYMAP=${SKYMAP:-.build/release/skymap}
FRONT=${FRONT:-tcp://127.0.0.1:5555}
BACK=${BACK:-tcp://127.0.0.1:5556}
for binary in "$SKYNET" "$SKYMAP"; do
    [ -x "$binary" ] || { echo "speedup.sh: no $binary (swift build -c release first)" >&2; exit 2; }
done
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

"$SKYMAP" render --local --out sky-local.png
"$SKYNET" broker --frontend "$FRONT" --backend "$BACK" --log-level warning > /dev/null &
pids+=($!)
sleep 0.5
running=0
for workers in 1 2 4; do
    while [ "$running" -lt "$workers" ]; do
        SKYNET_BROKER=$BACK SKYNET_SLOTS=1 SKYNET_WORKER_NAME="sky-$running" "$SKYMAP" worker 2> /dev/null &
        pids+=($!)
        running=$((running + 1))
    done
    sleep 1
    "$SKYMAP" render --broker "$FRONT" --out "sky-$workers.png"
    cmp sky-local.png "sky-$workers.png" && echo "sky-$workers.png is byte-identical to sky-local.png"
done
