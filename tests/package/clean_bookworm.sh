#!/bin/sh
# The Debian package on a clean machine: builds it (cpack), makes a minimal Debian bookworm
# with debootstrap --variant=minbase from the mirror this machine's apt sources name, installs
# the package there with dpkg -i (its dependencies then from that mirror with apt-get -f
# install, as a user would), and runs the installed diloco: --version, the published example
# from the installed docs, and a short simulated run; the Python package imports when python3
# is there. Needs root, debootstrap and the mirror; skipped (exit 77) without them. Takes a few
# minutes: labelled soak (scripts/test.sh --soak).
# usage: clean_bookworm.sh BUILD_DIR
set -eu
build=$1
[ "$(id -u)" = 0 ] || { echo "skipped: needs root (chroot)"; exit 77; }
command -v debootstrap >/dev/null || { echo "skipped: needs debootstrap"; exit 77; }
mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)
[ -n "$mirror" ] || mirror=$(sed -n 's/^deb \(\[[^]]*\] \)\{0,1\}\([^ ]*\) bookworm .*/\2/p' /etc/apt/sources.list 2>/dev/null | head -1)
[ -n "$mirror" ] || { echo "skipped: no Debian mirror in this machine's apt sources"; exit 77; }
work=$(mktemp -d)
root="$work/root"
cleanup() {
  umount "$root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }

(cd "$work" && cpack -G DEB -B "$work/pkg" --config "$build/CPackConfig.cmake" >"$work/cpack.log" 2>&1) ||
  fail "cpack: $(tail -5 "$work/cpack.log")"
deb=$(ls "$work"/pkg/diloco_*.deb)
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  fail "debootstrap from $mirror: $(tail -5 "$work/debootstrap.log")"
cp "$deb" "$root/tmp/"
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$root/proc"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
pkg=/tmp/$(basename "$deb")
# dpkg -i alone stops at the missing libraries of a minimal system; apt-get -f install takes
# them from the mirror and finishes the installation. The Python package imports PyTorch,
# which the package recommends: installed afterwards, as docs/build.md says.
in_root dpkg -i "$pkg" >"$work/dpkg.log" 2>&1 || true
in_root apt-get update -q >"$work/apt.log" 2>&1 || fail "apt-get update: $(tail -3 "$work/apt.log")"
in_root apt-get -f install -y -q --no-install-recommends >>"$work/apt.log" 2>&1 ||
  fail "apt-get -f install: $(tail -5 "$work/apt.log")"
in_root dpkg -s diloco | grep -q '^Status: install ok installed' || fail "diloco is not installed: $(cat "$work/dpkg.log")"
in_root diloco --version | grep -Eq '^diloco [0-9.]+$' || fail "diloco --version"
in_root diloco config convert /usr/share/doc/diloco/examples/published_cluster.yaml >/dev/null ||
  fail "the installed example does not convert"
in_root diloco simulate --budget 25600 --log-level error >"$work/run.txt" 2>&1 ||
  fail "a simulated run: $(tail -5 "$work/run.txt")"
grep -q "invariants held" "$work/run.txt" || fail "a simulated run: $(cat "$work/run.txt")"
python=absent
if in_root test -f /usr/lib/python3/dist-packages/diloco/__init__.py; then
  in_root apt-get install -y -q --no-install-recommends python3-torch python3-numpy \
    >>"$work/apt.log" 2>&1 || fail "apt-get install python3-torch: $(tail -5 "$work/apt.log")"
  in_root python3 -c 'import diloco; diloco.simulate' || fail "import diloco in the clean system"
  python=imports
fi
echo "clean bookworm: $(basename "$deb") installed with dpkg -i (+ apt-get -f install); diloco runs; Python package $python"
