#!/usr/bin/env bash
# Makes a test certificate authority and one certificate per node for mutual TLS between
# `diloco node` processes. For testing and trials: a real deployment uses its own CA.
# usage: scripts/make-certs.sh DIR NODE [NODE ...]
#   DIR/ca.pem, DIR/ca.key       the CA (self-signed, 30 days)
#   DIR/NODE.pem, DIR/NODE.key   each node's certificate (signed by the CA) and key
# The cluster file then says:  tls: {ca: DIR/ca.pem, certificate: DIR/{node}.pem, key: DIR/{node}.key}
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 DIR NODE [NODE ...]" >&2
  exit 2
fi
command -v openssl >/dev/null || { echo "make-certs: openssl is missing (apt-get install openssl)" >&2; exit 1; }
dir=$1
shift
mkdir -p "$dir"
if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=diloco test CA" \
    -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
fi
for node in "$@"; do
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$node" \
    -keyout "$dir/$node.key" -out "$dir/$node.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$node.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 30 -out "$dir/$node.pem" 2>/dev/null
  rm -f "$dir/$node.csr"
  echo "make-certs: $dir/$node.pem signed by $dir/ca.pem"
done
