# Helpers of the tests that start islands under torchrun (python_island_cli.sh,
# python_fsdp_cli.sh). Sourced (POSIX sh); the caller sets $work and $py (the python3 with torch).

# fail MESSAGE: says it, shows what each node, rank and torchrun attempt said, and exits 1.
fail() {
  echo "FAILED: $*" >&2
  for f in "$work"/*.txt; do
    echo "== $f"
    # What each rank and attempt said, and how torchrun saw each attempt end (an island's last
    # lines are torchrun's summary alone).
    tr '\r' '\n' <"$f" |
      grep -E '^(\[default[0-9]\]:)?(diloco|island rank|node [a-z])|failed \(exitcode' | tail -40
    tr '\r' '\n' <"$f" | grep -v '% .*tokens/s' | tail -30
  done >&2
  exit 1
}

# skip_without_torchrun: exits 77 (skipped), saying why, where this machine's PyTorch cannot run
# an island under torchrun.
skip_without_torchrun() {
  "$py" -c "import torch.distributed as d; assert d.is_available() and d.is_gloo_available()" 2>/dev/null || {
    echo "SKIPPED: this PyTorch has no torch.distributed with gloo"; exit 77; }
  # torchrun's rendezvous serves a TCPStore. Debian 13's python3-torch (2.6) is built without
  # libuv, which TCPStore asks for by default, and its torchrun cannot start at all (seen on a
  # fresh trixie: "use_libuv was requested but PyTorch was build without libuv support").
  "$py" - 2>"$work/store.txt" <<'PY' || {
import datetime
import torch.distributed as d
d.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10))
PY
    echo "SKIPPED: this PyTorch's TCPStore cannot serve torchrun's rendezvous ($(tail -1 "$work/store.txt")): islands need a PyTorch whose torchrun runs (PyPI's)"
    exit 77; }
  # torchrun's agents tell the workers to meet at the machine's own name (socket.getfqdn), not
  # at the rendezvous address: where that name does not resolve (a debootstrapped image without
  # /etc/hosts, seen on a fresh bookworm), the ranks never meet.
  "$py" -c "import socket; socket.getaddrinfo(socket.getfqdn(socket.gethostname()), None)" \
    2>/dev/null || {
    echo "SKIPPED: this machine's name ($(hostname)) does not resolve, and torchrun's workers meet there (add it to /etc/hosts)"
    exit 77; }
}
