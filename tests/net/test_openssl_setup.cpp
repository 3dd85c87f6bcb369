#include <openssl/err.h>
#include <openssl/ssl.h>
#include <catch2/catch.hpp>

#include "net/openssl_setup.hpp"

namespace {

// A client TLS connection on memory BIOs: its first read wants the server's handshake bytes.
struct memory_client {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  memory_client() {
    SSL_set_bio(ssl, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
    SSL_set_connect_state(ssl);
  }
  ~memory_client() {
    SSL_free(ssl);
    SSL_CTX_free(ctx);
  }
};

}  // namespace

TEST_CASE("openssl: the error queue guard is linked in and wraps OpenSSL's I/O calls") {
  REQUIRE(diloco::tls_error_queue_guard_active());
}

TEST_CASE("openssl: a stale error from another connection does not fail the next TLS read") {
  memory_client c;
  // What a peer that vanished without close_notify leaves on the thread's queue (OpenSSL 3).
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  char buf[16];
  const int n = SSL_read(c.ssl, buf, sizeof buf);
  REQUIRE(n <= 0);
  // Without the guard this is SSL_ERROR_SSL (the stale entry), and CAF closes the connection.
  CHECK(SSL_get_error(c.ssl, n) == SSL_ERROR_WANT_READ);
  ERR_clear_error();
}

TEST_CASE("openssl: a real failure of the same connection is still reported") {
  memory_client c;
  // The "server" answers with bytes that are not a TLS record.
  BIO_write(SSL_get_rbio(c.ssl), "HTTP/1.1 400 Bad\r\n\r\n", 20);
  char buf[16];
  const int n = SSL_read(c.ssl, buf, sizeof buf);
  REQUIRE(n <= 0);
  CHECK(SSL_get_error(c.ssl, n) == SSL_ERROR_SSL);
  ERR_clear_error();
}
