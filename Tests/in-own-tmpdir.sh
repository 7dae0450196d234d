#!/bin/sh
# Runs a command (the test suite) with TMPDIR set to a directory of its own, removed when it ends,
# pass or fail: what tests leave behind (their scratch directories, a command's working directory
# when its worker was SIGKILLed mid-run, a browser profile) goes with it instead of piling up in /tmp.
# The directory is world-writable and sticky, as /tmp is: some tests run commands as `nobody`.
dir=$(mktemp -d "${TMPDIR:-/tmp}/skynet-tests.XXXXXX") || exit 1
chmod 1777 "$dir" || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
TMPDIR="$dir" "$@"
