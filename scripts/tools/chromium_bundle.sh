#!/usr/bin/env bash
# A headless Chromium for a machine that has no apt and no network (the GPU machines this project is tested on), so
# the playground page's browser test (tests/serving/check_page.py, `page-vs-server` in make test) runs there against
# the real engine. Run this on a Debian 12 machine that has apt (this one): it installs Debian's
# chromium-headless-shell if missing and gathers under DIR (default .chromium, which git ignores) the shell, the two
# data files it reads (ICU's, V8's snapshot), every shared library it links but glibc's own, NSS's modules, the
# DejaVu fonts with a fontconfig file naming them, and a `chromium` launcher that points at all of it. Then it packs
# DIR into DIR.tar.xz, cut into parts of at most PART_MIB MiB (default 40; about 75 MB in all, where a device call
# carries 64 MiB at most with the working tree: the parts go over two or three calls to one warm machine). There:
#   cat .chromium.tar.xz.part-* | tar -xJ && PATH=$PWD/.chromium/bin:$PATH make test ...
# The libraries were built for Debian 12 (glibc 2.36): the other machine needs a glibc at least as new.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.chromium}
command -v apt-get >/dev/null && command -v dpkg >/dev/null || { echo "error: needs apt-get and dpkg (a Debian machine)" >&2; exit 1; }
shell=/usr/lib/chromium/chromium-headless-shell
if [ ! -x "$shell" ] || [ ! -d /usr/share/fonts/truetype/dejavu ]; then
    apt-get update -qq && apt-get install -y -qq chromium-headless-shell fonts-dejavu-core >/dev/null
fi
for f in icudtl.dat v8_context_snapshot.bin; do
    [ -f "/usr/lib/chromium/$f" ] || { echo "error: /usr/lib/chromium/$f missing (package chromium-common)" >&2; exit 1; }
done
rm -rf "$dir" "$dir".tar.xz.part-*
mkdir -p "$dir/lib" "$dir/bin" "$dir/fonts"
cp "$shell" /usr/lib/chromium/headless_*.pak /usr/lib/chromium/icudtl.dat /usr/lib/chromium/v8_context_snapshot.bin "$dir/"
# every library the shell links (resolved here), but glibc's: the other machine's own glibc must load them
ldd "$shell" | awk '/=> \//{print $3}' | grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
# NSS loads its token and crypto modules by name at run time
for lib in libsoftokn3.so libfreebl3.so libfreeblpriv3.so libnssckbi.so; do
    p=$(ls /usr/lib/x86_64-linux-gnu/"$lib" /usr/lib/x86_64-linux-gnu/nss/"$lib" 2>/dev/null | head -n 1 || true)
    [ -n "$p" ] && cp -L "$p" "$dir/lib/"
done
cp /usr/share/fonts/truetype/dejavu/*.ttf "$dir/fonts/"
cat > "$dir/fonts.conf" <<'EOF'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir prefix="relative">fonts</dir>
  <cachedir>/tmp/llmc-chromium-fontcache</cachedir>
</fontconfig>
EOF
cat > "$dir/bin/chromium" <<'EOF'
#!/bin/sh
# The bundled headless shell with its own libraries and fonts (scripts/tools/chromium_bundle.sh).
here=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FONTCONFIG_FILE="$here/fonts.conf"
exec "$here/chromium-headless-shell" "$@"
EOF
chmod +x "$dir/bin/chromium"
"$dir/bin/chromium" --no-sandbox --disable-gpu --dump-dom 'data:text/html,<p>bundle-ok</p>' 2>/dev/null | grep -q bundle-ok ||
    { echo "error: the bundled shell did not render a page here" >&2; exit 1; }
tar -cf - "$dir" | xz -9 -T0 | split -b "${PART_MIB:-40}M" -d - "$dir.tar.xz.part-"
echo "$dir: $(du -sh "$dir" | cut -f1), packed into $(ls "$dir".tar.xz.part-* | wc -l) parts: $(du -ch "$dir".tar.xz.part-* | tail -n 1 | cut -f1)"
