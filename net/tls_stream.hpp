// TLS over a TCP socket for the bulk channel: OpenSSL's records go to and from the socket in
// large reads and writes. Included by net/bulk_channel.cpp only (Asio and OpenSSL headers).
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstring>
#include <memory>
#include <vector>

namespace diloco {

// Asio's ssl::stream moves at most one TLS record (16 KiB) per system call and per pass through
// its composed operations, through a pair of 17 KiB BIOs: a payload of megabytes went over
// mutual TLS at a fifth of the speed of plain TCP. Here OpenSSL reads and writes through a BIO
// of this stream's own (no system calls of its own): a write encrypts up to `write_chunk`
// bytes of plaintext into one buffer that goes to the socket in one write, and a read takes
// what the socket has (up to `read_chunk`) and decrypts as much of it as the caller's buffer
// holds. One outstanding read and one outstanding write at a time, as for Asio's streams; all
// calls on the socket's one I/O thread.
class tls_stream {
 public:
  using tcp = boost::asio::ip::tcp;
  using error_code = boost::system::error_code;
  static constexpr size_t write_chunk = size_t{1} << 20;
  static constexpr size_t read_chunk = size_t{1} << 20;
  // A write completes once its ciphertext is queued and no more than this is waiting for the
  // socket: the next write is encrypted while the kernel takes the last.
  static constexpr size_t backlog = size_t{2} << 20;

  tls_stream(tcp::socket& socket, SSL_CTX* ctx) : s_(std::make_shared<state>(socket, ctx)) {}
  ~tls_stream() { s_->closed = true; }
  tls_stream(const tls_stream&) = delete;
  tls_stream& operator=(const tls_stream&) = delete;

  template <class Handler>
  void async_handshake(bool client, Handler&& h) {
    if (client) {
      SSL_set_connect_state(s_->ssl);
    } else {
      SSL_set_accept_state(s_->ssl);
    }
    s_->shaker =
        make_op([h = std::forward<Handler>(h)](const error_code& ec, size_t) mutable { h(ec); });
    state::handshake(s_);
  }

  template <class Buffers, class Handler>
  void async_write_some(const Buffers& bufs, Handler&& h) {
    auto o = make_op(std::forward<Handler>(h));
    state& s = *s_;
    if (s.write_error) return post(std::move(o), s.write_error, 0);
    size_t taken = 0;
    for (auto it = boost::asio::buffer_sequence_begin(bufs);
         it != boost::asio::buffer_sequence_end(bufs) && taken < write_chunk; ++it) {
      boost::asio::const_buffer b(*it);
      const size_t n = std::min(b.size(), write_chunk - taken);
      if (n == 0) continue;
      size_t written = 0;
      ERR_clear_error();
      const int r = SSL_write_ex(s.ssl, b.data(), n, &written);
      if (r <= 0) {
        s.write_error = s.failure(r);
        if (taken == 0) return post(std::move(o), s.write_error, 0);
        break;
      }
      taken += written;
    }
    if (taken == 0) return post(std::move(o), error_code(), 0);
    state::send(s_);
    if (s.write_error) return post(std::move(o), s.write_error, 0);
    if (s.unsent() <= backlog) return post(std::move(o), error_code(), taken);
    s.waiter = std::move(o);
    s.waiter_bytes = taken;
    s.waiter_limit = backlog;
  }

  template <class Buffers, class Handler>
  void async_read_some(const Buffers& bufs, Handler&& h) {
    auto o = make_op(std::forward<Handler>(h));
    boost::asio::mutable_buffer dst;
    for (auto it = boost::asio::buffer_sequence_begin(bufs);
         it != boost::asio::buffer_sequence_end(bufs); ++it) {
      dst = boost::asio::mutable_buffer(*it);
      if (dst.size() != 0) break;
    }
    if (dst.size() == 0) return post(std::move(o), error_code(), 0);
    s_->reader = std::move(o);
    s_->into = static_cast<uint8_t*>(dst.data());
    s_->room = dst.size();
    state::read(s_, false);
  }

 private:
  struct op {
    virtual ~op() = default;
    virtual void complete(const error_code& ec, size_t n) = 0;
  };
  template <class H>
  struct op_of final : op {
    explicit op_of(H&& x) : h(std::move(x)) {}
    void complete(const error_code& ec, size_t n) override { h(ec, n); }
    H h;
  };
  template <class H>
  static std::unique_ptr<op> make_op(H&& h) {
    using D = std::decay_t<H>;
    return std::make_unique<op_of<D>>(D(std::forward<H>(h)));
  }
  void post(std::unique_ptr<op> o, const error_code& ec, size_t n) {
    std::shared_ptr<op> shared(std::move(o));
    boost::asio::post(s_->socket.get_executor(), [shared, ec, n] { shared->complete(ec, n); });
  }

  // Everything the stream's operations touch; a socket completion holds it alive (a stream
  // destroyed while one is under way: the completion finds `closed`).
  struct state {
    state(tcp::socket& sock, SSL_CTX* ctx) : socket(sock), ssl(SSL_new(ctx)) {
      if (ssl == nullptr) throw std::bad_alloc();
      BIO* bio = BIO_new(method());
      if (bio == nullptr) {
        SSL_free(ssl);
        throw std::bad_alloc();
      }
      BIO_set_data(bio, this);
      BIO_set_init(bio, 1);
      SSL_set_bio(ssl, bio, bio);  // one BIO both ways; the SSL owns it
      in.resize(read_chunk);
    }
    ~state() { SSL_free(ssl); }

    tcp::socket& socket;
    SSL* ssl;
    bool closed = false;
    // Ciphertext: produced by OpenSSL and not yet given to the socket (out), being written
    // (wire); read from the socket and not yet taken by OpenSSL (in[in_at, in_end)).
    std::vector<uint8_t> out, wire;
    bool sending = false;
    std::vector<uint8_t> in;
    size_t in_at = 0, in_end = 0;
    error_code write_error, read_error;
    // The caller's write, once no more than waiter_limit bytes wait for the socket; the
    // caller's read; the handshake.
    std::unique_ptr<op> waiter;
    size_t waiter_bytes = 0, waiter_limit = 0;
    std::unique_ptr<op> reader;
    uint8_t* into = nullptr;
    size_t room = 0;
    std::unique_ptr<op> shaker;

    error_code failure(int r) {
      const int e = SSL_get_error(ssl, r);
      if (e == SSL_ERROR_ZERO_RETURN) return boost::asio::error::eof;
      if (e == SSL_ERROR_SSL) {
        const unsigned long code = ERR_get_error();
        ERR_clear_error();
        if (code != 0) {
          return error_code(static_cast<int>(code), boost::asio::error::get_ssl_category());
        }
      }
      ERR_clear_error();
      return boost::asio::ssl::error::stream_truncated;
    }

    // ---- OpenSSL's side of the BIO: memory only ----
    static BIO_METHOD* method() {
      static BIO_METHOD* m = [] {
        BIO_METHOD* x = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "diloco tls");
        BIO_meth_set_write(x, &bio_write);
        BIO_meth_set_read(x, &bio_read);
        BIO_meth_set_ctrl(x, &bio_ctrl);
        return x;
      }();
      return m;
    }
    static int bio_write(BIO* b, const char* data, int n) {
      auto* s = static_cast<state*>(BIO_get_data(b));
      BIO_clear_retry_flags(b);
      s->out.insert(s->out.end(), data, data + n);
      return n;
    }
    static int bio_read(BIO* b, char* data, int n) {
      auto* s = static_cast<state*>(BIO_get_data(b));
      BIO_clear_retry_flags(b);
      const size_t have = s->in_end - s->in_at;
      if (have == 0) {
        BIO_set_retry_read(b);
        return -1;
      }
      const size_t k = std::min(have, static_cast<size_t>(n));
      std::memcpy(data, s->in.data() + s->in_at, k);
      s->in_at += k;
      return static_cast<int>(k);
    }
    static long bio_ctrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

    // ---- the socket's side ----
    size_t unsent() const { return out.size() + wire.size(); }

    // What OpenSSL produced goes to the socket, in one write while the last is under way.
    static void send(const std::shared_ptr<state>& self) {
      state& s = *self;
      if (s.sending || s.out.empty() || s.write_error) return;
      s.wire.swap(s.out);
      s.out.clear();
      s.sending = true;
      boost::asio::async_write(s.socket, boost::asio::buffer(s.wire),
                               [self](const error_code& ec, size_t) {
                                 state& t = *self;
                                 t.sending = false;
                                 t.wire.clear();
                                 if (ec) {
                                   t.write_error = ec;
                                 } else if (t.closed) {
                                   t.write_error = boost::asio::error::operation_aborted;
                                 }
                                 send(self);
                                 wake(self);
                               });
    }
    // The caller's write completes when the backlog allows (or the socket failed).
    static void wake(const std::shared_ptr<state>& self) {
      state& s = *self;
      if (!s.waiter || (!s.write_error && s.unsent() > s.waiter_limit)) return;
      auto w = std::move(s.waiter);
      w->complete(s.write_error, s.write_error ? 0 : s.waiter_bytes);
    }

    // The handshake, a step at a time: this side's messages out, the peer's in; done once
    // this side's last messages are on the wire.
    static void handshake(const std::shared_ptr<state>& self) {
      state& s = *self;
      ERR_clear_error();
      const int r = SSL_do_handshake(s.ssl);
      if (r != 1 && SSL_get_error(s.ssl, r) != SSL_ERROR_WANT_READ) {
        const error_code ec = s.failure(r);
        return finish_handshake(self, ec);
      }
      send(self);
      if (r == 1) {
        if (s.write_error || s.unsent() == 0) return finish_handshake(self, s.write_error);
        s.waiter = make_op([self](const error_code& ec, size_t) { finish_handshake(self, ec); });
        s.waiter_limit = 0;
        return;
      }
      fill(self, [self](const error_code& ec) {
        if (ec) return finish_handshake(self, ec);
        handshake(self);
      });
    }
    static void finish_handshake(const std::shared_ptr<state>& self, const error_code& ec) {
      auto h = std::move(self->shaker);
      if (h) h->complete(ec, 0);
    }

    // More ciphertext from the socket into `in`, then `then(ec)`.
    template <class Then>
    static void fill(const std::shared_ptr<state>& self, Then&& then) {
      state& s = *self;
      if (s.read_error) return then(s.read_error);
      if (s.in_at == s.in_end) {
        s.in_at = s.in_end = 0;
      } else if (s.in_at != 0) {
        std::memmove(s.in.data(), s.in.data() + s.in_at, s.in_end - s.in_at);
        s.in_end -= s.in_at;
        s.in_at = 0;
      }
      s.socket.async_read_some(
          boost::asio::buffer(s.in.data() + s.in_end, s.in.size() - s.in_end),
          [self, then = std::forward<Then>(then)](const error_code& ec, size_t n) mutable {
            state& t = *self;
            if (t.closed && !ec) {
              t.read_error = boost::asio::error::operation_aborted;
            } else if (ec == boost::asio::error::eof) {
              // The peer's TCP stream ended without TLS's close: cut short.
              t.read_error = boost::asio::ssl::error::stream_truncated;
            } else if (ec) {
              t.read_error = ec;
            }
            t.in_end += t.read_error ? 0 : n;
            then(t.read_error);
          });
    }

    // The caller's read: plaintext from what has come, or more from the socket first.
    static void read(const std::shared_ptr<state>& self, bool from_socket) {
      state& s = *self;
      size_t got = 0;
      error_code ec;
      while (got < s.room) {
        size_t n = 0;
        ERR_clear_error();
        const int r = SSL_read_ex(s.ssl, s.into + got, s.room - got, &n);
        if (r > 0) {
          got += n;
          continue;
        }
        if (SSL_get_error(s.ssl, r) != SSL_ERROR_WANT_READ) ec = s.failure(r);
        break;
      }
      send(self);  // OpenSSL may have had something to say back (a key update)
      if (got == 0 && !ec) {
        return fill(self, [self](const error_code& e) {
          if (e) {
            auto r = std::move(self->reader);
            return r->complete(e, 0);
          }
          read(self, true);
        });
      }
      if (got == 0) s.read_error = ec;
      auto r = std::move(s.reader);
      if (from_socket) return r->complete(got != 0 ? error_code() : ec, got);
      // Plaintext that was there already: completed after this call returns, as Asio does.
      std::shared_ptr<op> shared(std::move(r));
      const error_code result = got != 0 ? error_code() : ec;
      boost::asio::post(s.socket.get_executor(),
                        [shared, result, got] { shared->complete(result, got); });
    }
  };

  std::shared_ptr<state> s_;
};

}  // namespace diloco
