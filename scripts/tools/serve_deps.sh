#!/usr/bin/env bash
# The server's libraries for a machine that has no apt and no network (the GPU machines this project is tested on):
# run this on a Debian 12 machine that has apt (this one); it downloads the Debian packages of cpp-httplib and
# nlohmann/json and of what cpp-httplib's header and library need (OpenSSL, zlib, brotli: headers and libraries) with
# `apt-get download`, and unpacks them under DIR/root (default DIR .serve_deps, which git ignores). Carry DIR/root to
# the other machine and build there with it; the programs find its libraries by their run path:
#   scripts/tools/serve_deps.sh                      # here
#   make serve_gpt2cu SERVE_PREFIX=.serve_deps/root      # there (make test SERVE_PREFIX=... likewise)
# Its libraries were built for Debian 12 (glibc 2.36): the other machine needs a glibc at least as new.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.serve_deps}
packages="libcpp-httplib-dev libcpp-httplib0.11 nlohmann-json3-dev libssl-dev libssl3 zlib1g-dev zlib1g libbrotli-dev libbrotli1"
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "error: needs apt-get and dpkg (a Debian machine)" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir/debs" "$dir/root"
(cd "$dir/debs" && apt-get download $packages)
for f in "$dir"/debs/*.deb; do dpkg -x "$f" "$dir/root"; done
# what a build does not read: static libraries, documentation
find "$dir/root" \( -name '*.a' -o -path '*/share/doc/*' -o -path '*/share/man/*' \) -delete 2>/dev/null || true
echo "unpacked under $dir/root ($(du -sh "$dir/root" | cut -f1)): make serve_gpt2cu SERVE_PREFIX=$dir/root"
