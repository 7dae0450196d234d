#!/usr/bin/env bash
# `make dist`: a Debian package and a tarball of the release build, in dist/.
#   dist/skynet_VERSION_ARCH.deb           apt install ./dist/skynet_*.deb
#   dist/skynet-VERSION-linux-ARCH.tar.gz  the same files, to unpack under /
# The man pages and shell completions are generated from the argument parser (never by hand); the
# package's dependencies come from the binary's libraries (dpkg-shlibdeps).
set -euo pipefail
cd "$(dirname "$0")/../.."
binary=.build/release/skynet
[ -x "$binary" ] || { echo "error: no release build at $binary: run 'make release' first" >&2; exit 1; }
for tool in dpkg-deb dpkg-shlibdeps fakeroot gzip; do
    command -v "$tool" >/dev/null || { echo "error: $tool is missing: apt-get install -y dpkg-dev fakeroot" >&2; exit 1; }
done
version=$("$binary" --version)
arch=$(dpkg --print-architecture)
stage=dist/stage
rm -rf "$stage" && mkdir -p "$stage/DEBIAN"

install -D -m 0755 "$binary" "$stage/usr/bin/skynet"
strip --strip-unneeded "$stage/usr/bin/skynet"

# Man pages: the argument parser's generate-manual plugin, one page per subcommand (skynet.broker(1), ...).
log=$(mktemp)
if ! swift package plugin generate-manual --multi-page --configuration debug \
    --date "$(date -u -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)" +%Y-%m-%d)" >"$log" 2>&1; then
    cat "$log" >&2
    echo "error: the argument parser's generate-manual plugin failed (above)" >&2
    exit 1
fi
rm -f "$log"
mkdir -p "$stage/usr/share/man/man1"
for page in .build/plugins/GenerateManual/outputs/skynet/*.1; do
    gzip -9n < "$page" > "$stage/usr/share/man/man1/$(basename "$page").gz"
done
# Completions: the argument parser writes them.
install -d "$stage/usr/share/bash-completion/completions" "$stage/usr/share/zsh/vendor-completions" \
    "$stage/usr/share/fish/vendor_completions.d"
"$binary" --generate-completion-script bash > "$stage/usr/share/bash-completion/completions/skynet"
"$binary" --generate-completion-script zsh > "$stage/usr/share/zsh/vendor-completions/_skynet"
"$binary" --generate-completion-script fish > "$stage/usr/share/fish/vendor_completions.d/skynet.fish"

install -D -m 0644 deploy/systemd/skynet-broker.service "$stage/lib/systemd/system/skynet-broker.service"
install -D -m 0644 deploy/systemd/skynet-worker@.service "$stage/lib/systemd/system/skynet-worker@.service"
install -D -m 0640 deploy/systemd/broker.env "$stage/etc/skynet/broker.env"
install -D -m 0640 deploy/systemd/worker.env "$stage/etc/skynet/worker.env"
install -D -m 0644 deploy/systemd/exec.conf "$stage/usr/share/doc/skynet/examples/exec.conf"
install -D -m 0644 README.md "$stage/usr/share/doc/skynet/README.md"
gzip -9n < CHANGELOG.md > "$stage/usr/share/doc/skynet/changelog.gz"
cat > "$stage/usr/share/doc/skynet/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: skynet
Comment: The skynet binary links the Swift runtime and the Swift packages named in the
 project's Package.resolved statically, each under its own license (Apache-2.0).
COPYRIGHT

# Dependencies from the binary's libraries (libzmq5, libssl3, libc6, ...), as Debian's tools find them.
shlib=$(mktemp -d)
mkdir -p "$shlib/debian"
printf 'Source: skynet\n\nPackage: skynet\nArchitecture: any\n' > "$shlib/debian/control"
depends=$(cd "$shlib" && dpkg-shlibdeps -O -e "$OLDPWD/$stage/usr/bin/skynet" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$shlib"
[ -n "$depends" ] || { echo "error: dpkg-shlibdeps found no dependencies for $binary" >&2; exit 1; }

size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CONTROL
Package: skynet
Version: $version
Architecture: $arch
Maintainer: SkyNet developers <skynet@localhost>
Installed-Size: $size
Depends: $depends, adduser
Section: net
Priority: optional
Description: distributed worker pool for Swift on ZeroMQ
 A broker queues ScanTasks; workers on any number of hosts run them; coordinators
 submit them from the command line and get results back as a stream. Includes
 systemd units (skynet-broker.service, skynet-worker@.service), man pages and
 shell completions.
CONTROL
printf '/etc/skynet/broker.env\n/etc/skynet/worker.env\n' > "$stage/DEBIAN/conffiles"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$stage/DEBIAN/"
(cd "$stage" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"

deb="dist/skynet_${version}_${arch}.deb"
tarball="dist/skynet-${version}-linux-${arch}.tar.gz"
rm -f dist/skynet_*.deb dist/skynet-*.tar.gz
fakeroot dpkg-deb --build -Zxz "$stage" "$deb" >/dev/null
tar --sort=name --owner=0 --group=0 --numeric-owner --exclude=./DEBIAN -C "$stage" -czf "$tarball" .
rm -rf "$stage"
echo "$deb ($(du -h "$deb" | cut -f1); installed $(( size / 1024 )) MiB; depends: $depends, adduser)"
echo "$tarball ($(du -h "$tarball" | cut -f1))"
