#include "net/openssl_setup.hpp"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <initializer_list>

namespace {

// OpenSSL's own definition of `name` (the next one after this executable's).
template <class Fn>
Fn openssl_own(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  static const auto real = openssl_own<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return real(ssl, buf, num);
}
int SSL_write(SSL* ssl, const void* buf, int num) {
  static const auto real = openssl_own<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return real(ssl, buf, num);
}
int SSL_accept(SSL* ssl) {
  static const auto real = openssl_own<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  return real(ssl);
}
int SSL_connect(SSL* ssl) {
  static const auto real = openssl_own<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return real(ssl);
}

}  // extern "C"

namespace diloco {

bool tls_error_queue_guard_active() {
  for (const char* name : {"SSL_read", "SSL_write", "SSL_accept", "SSL_connect"}) {
    if (openssl_own<void*>(name) == nullptr) return false;
  }
  return dlsym(RTLD_DEFAULT, "SSL_read") == reinterpret_cast<void*>(&SSL_read);
}

}  // namespace diloco
