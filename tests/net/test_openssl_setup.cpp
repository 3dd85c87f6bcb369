// The OpenSSL error-queue guard (net/openssl_setup.hpp): a stale error on the thread's queue,
// left by another connection, must not turn a TLS write that would block into a failure.
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tests/catch.hpp"

#include <cstdlib>
#include <string>
#include <vector>

#include "net/openssl_setup.hpp"
#include "tests/temp_dir.hpp"

namespace {

// A client and a server connected by a pair of small in-memory BIOs, handshake done.
struct tls_pair {
  SSL_CTX* server_ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX* client_ctx = SSL_CTX_new(TLS_client_method());
  SSL* server = nullptr;
  SSL* client = nullptr;
  explicit tls_pair(const std::string& certs) {
    REQUIRE(SSL_CTX_use_certificate_file(server_ctx, (certs + "/a.pem").c_str(),
                                         SSL_FILETYPE_PEM) == 1);
    REQUIRE(SSL_CTX_use_PrivateKey_file(server_ctx, (certs + "/a.key").c_str(), SSL_FILETYPE_PEM) ==
            1);
    server = SSL_new(server_ctx);
    client = SSL_new(client_ctx);
    BIO *c = nullptr, *s = nullptr;
    REQUIRE(BIO_new_bio_pair(&c, 4096, &s, 4096) == 1);
    SSL_set_bio(client, c, c);
    SSL_set_bio(server, s, s);
    SSL_set_connect_state(client);
    SSL_set_accept_state(server);
    for (int i = 0; i < 20 && !(SSL_is_init_finished(client) && SSL_is_init_finished(server));
         ++i) {
      SSL_do_handshake(client);
      SSL_do_handshake(server);
    }
    REQUIRE(SSL_is_init_finished(client));
    ERR_clear_error();
  }
  ~tls_pair() {
    SSL_free(client);
    SSL_free(server);
    SSL_CTX_free(client_ctx);
    SSL_CTX_free(server_ctx);
  }
  tls_pair(const tls_pair&) = delete;
  tls_pair& operator=(const tls_pair&) = delete;
};

std::string make_certs(const diloco::testing::temp_dir& dir) {
  const std::string d = dir.path().string();
  const std::string cmd =
      std::string(DILOCO_SOURCE_DIR) + "/scripts/make-certs.sh " + d + " a >/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return d;
}

}  // namespace

TEST_CASE("openssl: the error queue guard is linked in and wraps OpenSSL's I/O calls") {
  REQUIRE(diloco::tls_error_queue_guard_active());
}

TEST_CASE("openssl: a stale error from another connection does not fail a write that would block") {
  diloco::testing::temp_dir dir;
  tls_pair p(make_certs(dir));
  std::vector<char> big(1 << 16, 'x');
  // The peer does not read: the pipe fills and the write would block.
  int n = SSL_write(p.client, big.data(), static_cast<int>(big.size()));
  REQUIRE(n <= 0);
  REQUIRE(SSL_get_error(p.client, n) == SSL_ERROR_WANT_WRITE);
  // What a peer that vanished without close_notify leaves on the thread's queue (OpenSSL 3).
  ERR_raise(ERR_LIB_SSL, SSL_R_UNEXPECTED_EOF_WHILE_READING);
  n = SSL_write(p.client, big.data(), static_cast<int>(big.size()));
  REQUIRE(n <= 0);
  // Without the guard OpenSSL 3.0 reports SSL_ERROR_SSL here, and CAF closes the connection.
  CHECK(SSL_get_error(p.client, n) == SSL_ERROR_WANT_WRITE);
  ERR_clear_error();
}

TEST_CASE("openssl: a real failure of a connection is still reported") {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  SSL_set_bio(ssl, BIO_new(BIO_s_mem()), BIO_new(BIO_s_mem()));
  SSL_set_connect_state(ssl);
  // The "server" answers with bytes that are not a TLS record.
  BIO_write(SSL_get_rbio(ssl), "HTTP/1.1 400 Bad\r\n\r\n", 20);
  char buf[16];
  const int n = SSL_read(ssl, buf, sizeof buf);
  REQUIRE(n <= 0);
  CHECK(SSL_get_error(ssl, n) == SSL_ERROR_SSL);
  ERR_clear_error();
  SSL_free(ssl);
  SSL_CTX_free(ctx);
}
