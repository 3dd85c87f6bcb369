// Process-wide OpenSSL fix-up for deployed nodes.
#pragma once

namespace diloco {

// OpenSSL requires the thread's error queue to be empty before each TLS I/O call, or
// SSL_get_error() reports a stale error for it. OpenSSL 3 leaves "unexpected eof while reading"
// on the queue when a TLS peer vanishes without close_notify (a node killed with SIGKILL).
// CAF 0.17's TLS sessions (caf-openssl, written for OpenSSL 1.1) do not clear the queue, so the
// next write of any other TLS connection on the middleman's thread that would block came back
// as SSL_ERROR_SSL (SSL_read happens to clear the queue itself in OpenSSL 3.0; SSL_write does
// not), and CAF closed that connection: one node's death cut the TLS links of its peers. This
// object file therefore defines SSL_read, SSL_write, SSL_accept and SSL_connect for the executable:
// each clears the queue and calls OpenSSL's own (dlsym RTLD_NEXT), so every caller in the process,
// CAF included, gets OpenSSL's documented contract. Returns whether the wrappers are in place (the
// link pulled this object file in and OpenSSL's functions were found).
bool tls_error_queue_guard_active();

}  // namespace diloco
