#!/bin/sh
# Installation: `cmake --install` puts the executable, the docs, the examples and (when built)
# the Python package under a prefix, and they work from there; `cpack` makes a Debian package
# whose control fields name the shared libraries the executable needs and whose contents,
# unpacked, run. (Installing it with dpkg -i on a clean bookworm: docs/build.md.)
# usage: package_cli.sh BUILD_DIR
set -eu
build=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
version=$("$build/apps/diloco" --version)

cmake --install "$build" --prefix "$work/prefix" >"$work/install.log" || fail "cmake --install: $(tail -5 "$work/install.log")"
[ "$("$work/prefix/bin/diloco" --version)" = "$version" ] || fail "installed diloco --version"
[ -f "$work/prefix/share/doc/diloco/README.md" ] && [ -f "$work/prefix/share/doc/diloco/config.md" ] ||
  fail "docs not installed: $(ls -R "$work/prefix/share" | head -20)"
[ -f "$work/prefix/share/doc/diloco/examples/published_cluster.yaml" ] || fail "examples not installed"
"$work/prefix/bin/diloco" config convert "$work/prefix/share/doc/diloco/examples/published_cluster.yaml" \
  >/dev/null || fail "the installed example does not convert"
python=no
if [ -d "$build/python/diloco" ]; then
  python=yes
  ls "$work/prefix/lib/python3/dist-packages/diloco/"_diloco*.so >/dev/null ||
    fail "the Python extension is not installed"
  PYTHONPATH="$work/prefix/lib/python3/dist-packages" /usr/bin/python3 -c \
    'import diloco, sys; sys.exit(0 if hasattr(diloco, "simulate") else 1)' ||
    fail "the installed Python package does not import"
fi

(cd "$work" && cpack -G DEB -B "$work/pkg" --config "$build/CPackConfig.cmake" --verbose \
  >"$work/cpack.log" 2>&1) ||
  fail "cpack: $(grep -i -B2 -A8 'shlibdeps\|error' "$work/cpack.log" | tail -40)"
deb=$(ls "$work"/pkg/diloco_*.deb)
dpkg-deb -f "$deb" Depends | grep -q 'libcaf-core0.17' || fail "Depends: $(dpkg-deb -f "$deb" Depends)"
if ldd "$build/apps/diloco" | grep -q 'libmimalloc'; then
  dpkg-deb -f "$deb" Depends | grep -q 'libmimalloc' || fail "Depends without mimalloc: $(dpkg-deb -f "$deb" Depends)"
fi
dpkg-deb -c "$deb" >"$work/contents"
grep -q '\./usr/bin/diloco$' "$work/contents" || fail "no /usr/bin/diloco in the package"
grep -q '\./usr/share/doc/diloco/README.md$' "$work/contents" || fail "no docs in the package"
if [ $python = yes ]; then
  grep -q '\./usr/lib/python3/dist-packages/diloco/__init__.py$' "$work/contents" ||
    fail "no Python package in the Debian package"
fi
grep -q '\./usr/share/diloco/alerts.rules.yml$' "$work/contents" || fail "no alerting rules in the package"
grep -q '\./usr/lib/systemd/system/diloco-node@.service$' "$work/contents" || fail "no systemd unit in the package"
grep -q '\./usr/share/man/man1/diloco.1.gz$' "$work/contents" || fail "no manual page in the package"
grep -q '\./usr/share/bash-completion/completions/diloco$' "$work/contents" || fail "no bash completion in the package"
grep -q '\./usr/share/doc/diloco/copyright$' "$work/contents" || fail "no copyright file in the package"
dpkg-deb -x "$deb" "$work/root"
[ "$("$work/root/usr/bin/diloco" --version)" = "$version" ] || fail "the packaged diloco does not run"
# The manual page has every command and option --help names; the completion completes them.
gzip -dc "$work/root/usr/share/man/man1/diloco.1.gz" >"$work/diloco.1"
for c in chaos config inspect node report replay simulate train; do
  grep -q "^\.SH \"DILOCO $(echo $c | tr a-z A-Z)\"" "$work/diloco.1" || fail "manual page: no section for $c"
done
grep -q '^\.B \\-\\-snapshot\\-dir' "$work/diloco.1" || fail "manual page: no --snapshot-dir"
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -z "$work/diloco.1" 2>"$work/groff.txt" || fail "groff: $(cat "$work/groff.txt")"
  [ ! -s "$work/groff.txt" ] || fail "groff warns: $(head -5 "$work/groff.txt")"
fi
words=$(bash -c '. "$1"; COMP_WORDS=(diloco simulate --snap); COMP_CWORD=2; _diloco; echo "${COMPREPLY[*]}"' \
  sh "$work/root/usr/share/bash-completion/completions/diloco")
case " $words " in *" --snapshot-dir "*) ;; *) fail "completion of 'diloco simulate --snap': '$words'" ;; esac
# lintian, where it is installed (scripts/install-deps.sh --test): no error, no warning.
lint="not run (no lintian)"
if command -v lintian >/dev/null; then
  lintian --tag-display-limit 0 "$deb" >"$work/lintian.txt" 2>&1 || true
  if grep -q '^[EW]:' "$work/lintian.txt"; then fail "lintian: $(grep '^[EW]:' "$work/lintian.txt")"; fi
  lint="lintian clean"
fi
# The unit as systemd reads it, pointed at the unpacked executable (skipped without systemd).
unit=checked
if command -v systemd-analyze >/dev/null; then
  sed "s#/usr/bin/diloco#$work/root/usr/bin/diloco#" "$work/root/usr/lib/systemd/system/diloco-node@.service" \
    >"$work/diloco-node@.service"
  systemd-analyze verify "$work/diloco-node@a.service" >"$work/verify.txt" 2>&1 ||
    fail "systemd-analyze verify: $(cat "$work/verify.txt")"
  if [ -s "$work/verify.txt" ]; then fail "systemd-analyze verify: $(cat "$work/verify.txt")"; fi
else
  unit="not checked (no systemd-analyze)"
fi
echo "install: $version under a prefix and in $(basename "$deb") ($(du -k "$deb" | cut -f1) KiB, python package: $python, systemd unit: $unit, $lint)"
