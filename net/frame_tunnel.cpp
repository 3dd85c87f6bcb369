#include "net/frame_tunnel.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

#include "base/check.hpp"
#include "net/handshake.hpp"
#include "net/le.hpp"
#include "net/listen.hpp"

namespace diloco {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr uint32_t hello_magic = 0x48544c44;      // "DLTH"
constexpr uint32_t challenge_magic = 0x43544c44;  // "DLTC"
constexpr uint32_t frame_magic = 0x46544c44;      // "DLTF"
constexpr uint32_t refusal_magic = 0x52544c44;    // "DLTR": the front refused the hello, u32 why
enum refusal : uint32_t { other_run = 1, unknown_node = 2, secret_needed = 3, secret_differs = 4 };
constexpr uint16_t wire_version = 2;
constexpr size_t frame_header_bytes = 8;
// CAF 0.17's BASP header (caf/io/basp/header.hpp, header_size): operation, two padding bytes,
// flags, then the payload's length (u32, network byte order, as CAF's binary serializer writes
// integers), operation data (u64) and the source and destination actors (u64 each).
constexpr size_t basp_header_bytes = 32;
uint64_t basp_payload_length(const uint8_t* head) {
  return (uint64_t{head[4]} << 24) | (uint64_t{head[5]} << 16) | (uint64_t{head[6]} << 8) |
         uint64_t{head[7]};
}

}  // namespace

struct frame_tunnel::impl {
  tunnel_options o;
  hello_key key;
  uint32_t pending = 0;  // accepted connections that have not answered yet (I/O thread)
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor front{io};
  std::vector<std::unique_ptr<tcp::acceptor>> stubs;  // per peer node (null for this node)
  std::thread runner;
  mutable std::mutex mu;
  tunnel_stats st;

  std::map<uint32_t, std::string> refusals;  // by peer node

  void refused_by(uint32_t node, uint64_t why) {
    std::lock_guard<std::mutex> g(mu);
    refusals[node] = why == other_run ? "it runs another cluster file (its nodes, placement or "
                                        "settings differ)"
                     : why == secret_needed ? "it requires the run's shared secret (secret_file), "
                                              "which this node was not given"
                     : why == secret_differs
                         ? "its shared secret differs from this node's (check secret_file on "
                           "both)"
                         : "it does not know this node";
  }

  void count(uint64_t tunnel_stats::*field, uint64_t n = 1) {
    std::lock_guard<std::mutex> g(mu);
    st.*field += n;
  }

  // One tunnelled connection: `net` carries frames, `raw` the middleman's bytes.
  struct session : std::enable_shared_from_this<session> {
    session(impl* owner, tcp::socket n, tcp::socket r)
        : ch(owner), net(std::move(n)), raw(std::move(r)) {}
    impl* ch;  // outlives every session: they live in its io_context
    tcp::socket net, raw;
    challenge_bytes challenge{};
    answer_bytes answer{};
    bool answered = false;  // inbound: passed the challenge (no longer pending)
    asio::steady_timer deadline{net.get_executor()};
    std::array<uint8_t, frame_header_bytes> in_head{}, out_head{};
    std::vector<uint8_t> in_buf, out_buf = std::vector<uint8_t>(64 << 10);
    // Where the incoming stream of middleman messages stands: a header being read (its bytes so
    // far), or the rest of a message's payload.
    std::array<uint8_t, basp_header_bytes> message_head{};
    size_t head_have = 0;
    uint64_t body_left = 0;
    bool closed = false;
    int64_t outbound = -1;  // the peer node of an outgoing tunnel
    // An outgoing connection to a host that does not answer (dead, or its packets dropped)
    // would wait for the kernel's SYN retries, about two minutes; the middleman's connect, and
    // a node dialing a restarted peer, with it. It is given up after connect_timeout.
    asio::steady_timer connect_timer{net.get_executor()};
    static constexpr std::chrono::seconds connect_timeout{3};

    void close() {
      if (closed) return;
      closed = true;
      if (!answered && outbound < 0) ch->pending -= 1;
      answered = true;
      deadline.cancel();
      error_code ignored;
      net.close(ignored);
      raw.close(ignored);
    }
    void refuse(uint64_t tunnel_stats::*why) {
      ch->count(why);
      close();
    }

    // Inbound: a challenge, the peer's answer within the hello timeout, then a connection to
    // the local middleman.
    void read_hello() {
      auto self = shared_from_this();
      deadline.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(ch->o.hello_timeout_s)));
      deadline.async_wait([self](const error_code& ec) {
        if (!ec && !self->answered) self->refuse(&tunnel_stats::hello_timeout);
      });
      challenge = make_challenge(challenge_magic, wire_version, ch->key.secret);
      asio::async_write(net, asio::buffer(challenge), [self](const error_code& ec, size_t) {
        if (ec) return self->close();
        self->read_answer();
      });
    }

    void read_answer() {
      auto self = shared_from_this();
      asio::async_read(net, asio::buffer(answer), [self](const error_code& ec, size_t n) {
        if (self->closed) return;
        if (ec) return self->refuse(n == 0 ? &tunnel_stats::bad_hello : &tunnel_stats::truncated);
        const auto& o = self->ch->o;
        const hello_verdict verdict = check_answer(
            self->answer, self->challenge, self->ch->key,
            {hello_magic, wire_version, o.identity, static_cast<uint32_t>(o.peers.size()), o.self});
        if (verdict == hello_verdict::malformed) return self->refuse(&tunnel_stats::bad_hello);
        // A hello of this run whose tag does not verify with the run's secret: a node given
        // another secret file (or an outsider who knows the cluster file). Either learns only
        // that its secret is not this node's; a misconfigured node can then say so.
        if (verdict != hello_verdict::ok) {
          // A node of another configuration: tell it why before closing (it says so).
          self->ch->count(&tunnel_stats::bad_hello);
          self->answered = true;
          self->ch->pending -= 1;
          le::put(self->out_head.data(), refusal_magic, 4);
          le::put(self->out_head.data() + 4,
                  verdict == hello_verdict::other_run ? other_run
                  : verdict == hello_verdict::bad_tag ? secret_differs
                                                      : unknown_node,
                  4);
          asio::async_write(self->net, asio::buffer(self->out_head),
                            [self](const error_code&, size_t) { self->close(); });
          return;
        }
        self->answered = true;
        self->ch->pending -= 1;
        self->deadline.cancel();
        const tcp::endpoint caf(asio::ip::address_v4::loopback(), o.caf_port);
        self->raw.async_connect(caf, [self](const error_code& ec2) {
          if (ec2) return self->close();
          self->ch->count(&tunnel_stats::tunnels);
          self->start();
        });
      });
    }

    // Outbound: connect to the peer's front and say hello.
    void connect_out(uint32_t node) {
      outbound = node;
      auto self = shared_from_this();
      auto resolver = std::make_shared<tcp::resolver>(net.get_executor());
      const auto& peer = ch->o.peers[node];
      connect_timer.expires_after(connect_timeout);
      connect_timer.async_wait([self](const error_code& ec) {
        if (!ec) self->close();  // still connecting (a connected tunnel cancels the timer)
      });
      resolver->async_resolve(
          peer.host, std::to_string(peer.port),
          [self, resolver](const error_code& ec, tcp::resolver::results_type found) {
            if (ec) return self->close();
            asio::async_connect(self->net, found,
                                [self](const error_code& ec2, const tcp::endpoint&) {
                                  self->connect_timer.cancel();
                                  if (ec2) return self->close();
                                  self->answer_challenge();
                                });
          });
    }

    // Outbound: the peer front's challenge, then this node's answer.
    void answer_challenge() {
      auto self = shared_from_this();
      asio::async_read(net, asio::buffer(challenge), [self](const error_code& ec, size_t) {
        const challenge_fields c = get_challenge(self->challenge.data());
        if (ec || c.magic != challenge_magic || c.version != wire_version) return self->close();
        if (c.secret_required && !self->ch->key.secret) {
          self->ch->refused_by(static_cast<uint32_t>(self->outbound), secret_needed);
          return self->close();
        }
        const auto& o = self->ch->o;
        self->answer = make_answer(self->ch->key, self->challenge,
                                   {hello_magic, wire_version, o.self, o.identity});
        asio::async_write(self->net, asio::buffer(self->answer),
                          [self](const error_code& ec2, size_t) {
                            if (ec2) return self->close();
                            self->start();
                          });
      });
    }

    void start() {
      error_code ignored;
      net.set_option(tcp::no_delay(true), ignored);
      raw.set_option(tcp::no_delay(true), ignored);
      pump_out();
      pump_in();
    }

    // The middleman's bytes -> frames.
    void pump_out() {
      auto self = shared_from_this();
      raw.async_read_some(asio::buffer(out_buf), [self](const error_code& ec, size_t n) {
        if (ec) return self->close();
        // A frame's length field is 32 bits and a frame is never empty (the reader refuses one).
        DILOCO_CHECK(n > 0 && n <= self->out_buf.size() && n <= UINT32_MAX,
                     "frame tunnel: a frame of 1 to 2^32 - 1 bytes, within the buffer");
        le::put(self->out_head.data(), frame_magic, 4);
        le::put(self->out_head.data() + 4, n, 4);
        std::array<asio::const_buffer, 2> bufs{asio::buffer(self->out_head),
                                               asio::buffer(self->out_buf.data(), n)};
        asio::async_write(self->net, bufs, [self, n](const error_code& ec2, size_t) {
          if (ec2) return self->close();
          self->ch->count(&tunnel_stats::bytes_out, n);
          self->pump_out();
        });
      });
    }

    // Follows the middleman's messages through a frame's bytes: false when a header declares
    // a payload above max_message_bytes (nothing of that frame may go through).
    bool messages_in_bounds(const std::vector<uint8_t>& bytes) {
      const uint64_t bound = ch->o.max_message_bytes;
      if (bound == 0) return true;
      size_t at = 0;
      while (at < bytes.size()) {
        const size_t left = bytes.size() - at;
        if (body_left > 0) {
          const auto take = static_cast<size_t>(std::min<uint64_t>(body_left, left));
          body_left -= take;
          at += take;
          continue;
        }
        const size_t take = std::min(basp_header_bytes - head_have, left);
        std::memcpy(message_head.data() + head_have, bytes.data() + at, take);
        head_have += take;
        at += take;
        if (head_have < basp_header_bytes) break;
        head_have = 0;
        body_left = basp_payload_length(message_head.data());
        if (body_left > bound) return false;
      }
      return true;
    }

    // Frames -> the middleman's bytes, each frame checked before a byte goes through.
    void pump_in() {
      auto self = shared_from_this();
      asio::async_read(net, asio::buffer(in_head), [self](const error_code& ec, size_t n) {
        if (ec) {
          if (n != 0) return self->refuse(&tunnel_stats::truncated);
          return self->close();
        }
        const uint64_t length = le::get(self->in_head.data() + 4, 4);
        if (le::get(self->in_head.data(), 4) == refusal_magic && self->outbound >= 0) {
          self->ch->refused_by(static_cast<uint32_t>(self->outbound), length);
          return self->close();
        }
        if (le::get(self->in_head.data(), 4) != frame_magic || length == 0)
          return self->refuse(&tunnel_stats::bad_frame);
        if (length > self->ch->o.max_frame_bytes) return self->refuse(&tunnel_stats::oversized);
        self->in_buf.resize(length);
        asio::async_read(self->net, asio::buffer(self->in_buf),
                         [self](const error_code& ec2, size_t) {
                           if (ec2) return self->refuse(&tunnel_stats::truncated);
                           if (!self->messages_in_bounds(self->in_buf))
                             return self->refuse(&tunnel_stats::oversized_message);
                           asio::async_write(self->raw, asio::buffer(self->in_buf),
                                             [self](const error_code& ec3, size_t m) {
                                               if (ec3) return self->close();
                                               self->ch->count(&tunnel_stats::bytes_in, m);
                                               self->pump_in();
                                             });
                         });
      });
    }
  };

  void accept_front() {
    front.async_accept([self = this](const error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (ec) {
        // Out of descriptors (or another passing error): try again a little later.
        self->accept_retry.expires_after(std::chrono::milliseconds(50));
        self->accept_retry.async_wait([self](const error_code& e) {
          if (!e) self->accept_front();
        });
        return;
      }
      self->count(&tunnel_stats::accepted);
      if (self->pending >= self->o.pending_max) {
        self->count(&tunnel_stats::over_capacity);  // `s` closes here
      } else {
        self->pending += 1;
        std::make_shared<session>(self, std::move(s), tcp::socket(self->io))->read_hello();
      }
      self->accept_front();
    });
  }

  asio::steady_timer accept_retry{io};

  void accept_stub(uint32_t node) {
    stubs[node]->async_accept([self = this, node](const error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec)
        std::make_shared<session>(self, tcp::socket(self->io), std::move(s))->connect_out(node);
      self->accept_stub(node);
    });
  }
};

frame_tunnel::frame_tunnel(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<frame_tunnel>> frame_tunnel::open(const tunnel_options& options) {
  if (options.self >= options.peers.size())
    return status(errc::invalid_argument, "tunnel: node index outside the peer list");
  auto p = std::make_unique<impl>();
  p->o = options;
  p->key = options.secret.empty() ? hello_key::of_identity(options.identity)
                                  : hello_key::of_secret(options.secret);
  if (auto st = listen_on(p->front, options.listen_host, options.front_port, "front"); !st.ok())
    return st;
  error_code ec;
  for (uint32_t n = 0; n < options.peers.size(); ++n) {
    if (n == options.self) {
      p->stubs.emplace_back();
      continue;
    }
    auto a = std::make_unique<tcp::acceptor>(p->io);
    const tcp::endpoint local(asio::ip::address_v4::loopback(), 0);
    a->open(local.protocol(), ec);
    if (!ec) a->bind(local, ec);
    if (!ec) a->listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return status(errc::io_error, "tunnel: local port: " + ec.message());
    p->stubs.push_back(std::move(a));
  }
  p->accept_front();
  for (uint32_t n = 0; n < options.peers.size(); ++n) {
    if (p->stubs[n]) p->accept_stub(n);
  }
  p->runner = std::thread([raw = p.get()] { raw->io.run(); });
  return std::unique_ptr<frame_tunnel>(new frame_tunnel(std::move(p)));
}

frame_tunnel::~frame_tunnel() {
  impl_->io.stop();
  if (impl_->runner.joinable()) impl_->runner.join();
}

uint16_t frame_tunnel::outbound_port(uint32_t node) const {
  if (node >= impl_->stubs.size() || !impl_->stubs[node]) return 0;
  error_code ec;
  const auto ep = impl_->stubs[node]->local_endpoint(ec);
  return ec ? 0 : ep.port();
}

uint16_t frame_tunnel::front_port() const {
  error_code ec;
  const auto ep = impl_->front.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

std::string frame_tunnel::refusal(uint32_t node) const {
  std::lock_guard<std::mutex> g(impl_->mu);
  const auto it = impl_->refusals.find(node);
  return it == impl_->refusals.end() ? std::string() : it->second;
}

tunnel_stats frame_tunnel::stats() const {
  std::lock_guard<std::mutex> g(impl_->mu);
  return impl_->st;
}

}  // namespace diloco
