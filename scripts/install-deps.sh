#!/usr/bin/env bash
# Installs the Debian packages diloco needs, and only those that are missing.
# Idempotent and non-interactive. Usage: scripts/install-deps.sh [--test] [--bench] [--slurm]
#   (no flag)  what building needs: compiler, CMake, git and the libraries
#   --test     also what the test suite drives: promtool (Prometheus), headless Chromium, lintian,
#              iproute2 (ip, tc) for the network-namespace test, and PyTorch (python3-torch,
#              numpy, OpenBLAS for torch's matrix products) for the PyTorch learner tests,
#              python3-yaml for the Kubernetes manifest's test, procps (pgrep, pkill) for the
#              tests that stop the processes they started, python3-setuptools (torch.compile's
#              inductor builds its CPU kernels through it; Debian's python3-torch does not pull it)
#              and, on Debian 13 and later (torch 2.x), libtorch-dev: the C++ headers those
#              kernels include
#   --bench    also what the benchmarks and examples use: PyTorch from Debian, and the English
#              text of the fortunes package (examples/transformer_text.py)
#   --slurm    also a single-host Slurm for the Slurm job test (slurmctld, slurmd, the client
#              commands, munge); the test starts the daemons itself, with its own configuration
set -euo pipefail

packages=(
  g++ make cmake git                       # toolchain
  libcaf-dev libssl-dev openssl            # actors, middleman, TLS transport, test certificates
  libboost-dev libboost-system-dev         # Boost.Asio (HTTP endpoint, bulk channel)
  libeigen3-dev                            # dense math
  libcereal-dev                            # snapshot serialization
  libspdlog-dev                            # logging
  libyaml-cpp-dev                          # cluster files
  libxxhash-dev                            # checksums
  catch2                                   # tests
  nlohmann-json3-dev                       # run reports; tests parse exported JSON
  libmimalloc-dev                          # the executable's allocator
  pybind11-dev python3-dev                 # the Python package's extension (python/)
)
for arg in "$@"; do
  case "$arg" in
    --test) packages+=(prometheus chromium iproute2 python3-torch python3-numpy libopenblas0-pthread
                 dpkg-dev file python3-venv lintian python3-yaml procps python3-setuptools)
            # Debian 12's torch is 1.13 (no torch.compile): its headers would go unused.
            release=$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo 0)
            if ! [[ "$release" =~ ^[0-9]+$ ]] || [ "$release" -ge 13 ]; then packages+=(libtorch-dev); fi ;;
    --bench) packages+=(python3 python3-torch python3-numpy libopenblas0-pthread fortunes) ;;
    --slurm) packages+=(slurmctld slurmd slurm-client munge) ;;
    *) echo "install-deps.sh: unknown option '$arg' (expected --test, --bench or --slurm)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
