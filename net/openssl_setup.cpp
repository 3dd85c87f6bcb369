#include "net/openssl_setup.hpp"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace {

template <class Fn>
Fn next_definition(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

using rw_fn = int (*)(SSL*, void*, int);
using w_fn = int (*)(SSL*, const void*, int);
using hs_fn = int (*)(SSL*);

rw_fn real_read() {
  static const rw_fn f = next_definition<rw_fn>("SSL_read");
  return f;
}
w_fn real_write() {
  static const w_fn f = next_definition<w_fn>("SSL_write");
  return f;
}
hs_fn real_accept() {
  static const hs_fn f = next_definition<hs_fn>("SSL_accept");
  return f;
}
hs_fn real_connect() {
  static const hs_fn f = next_definition<hs_fn>("SSL_connect");
  return f;
}

}  // namespace

extern "C" {

int SSL_read(SSL* ssl, void* buf, int num) {
  ERR_clear_error();
  return real_read()(ssl, buf, num);
}
int SSL_write(SSL* ssl, const void* buf, int num) {
  ERR_clear_error();
  return real_write()(ssl, buf, num);
}
int SSL_accept(SSL* ssl) {
  ERR_clear_error();
  return real_accept()(ssl);
}
int SSL_connect(SSL* ssl) {
  ERR_clear_error();
  return real_connect()(ssl);
}

}  // extern "C"

namespace diloco {

bool tls_error_queue_guard_active() {
  return real_read() != nullptr && real_write() != nullptr && real_accept() != nullptr &&
         real_connect() != nullptr &&
         reinterpret_cast<void*>(dlsym(RTLD_DEFAULT, "SSL_read")) ==
             reinterpret_cast<void*>(&SSL_read);
}

}  // namespace diloco
