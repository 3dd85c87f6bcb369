#include "net/http_server.hpp"

#include "net/listen.hpp"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <istream>
#include <thread>

namespace diloco {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr size_t max_request_bytes = 8192;

const char* reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

}  // namespace

struct http_server::impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  handler serve;
  std::thread runner;
  std::atomic<uint64_t> answered{0}, bad{0};

  struct connection : std::enable_shared_from_this<connection> {
    connection(impl& owner, tcp::socket s)
        : srv(owner), sock(std::move(s)), buf(max_request_bytes), timeout(sock.get_executor()) {}
    impl& srv;
    tcp::socket sock;
    asio::streambuf buf;
    asio::steady_timer timeout;
    std::string out;

    void start() {
      auto self = shared_from_this();
      // A client that sends nothing (or too slowly) is dropped after 10 s.
      timeout.expires_after(std::chrono::seconds(10));
      timeout.async_wait([self](const error_code& ec) {
        if (!ec) {
          error_code ignored;
          self->sock.close(ignored);
        }
      });
      asio::async_read_until(sock, buf, "\r\n\r\n", [self](const error_code& ec, size_t) {
        self->timeout.cancel();
        if (ec == asio::error::not_found) return self->reply({431, "text/plain", "too large\n"});
        if (ec) return;
        std::istream in(&self->buf);
        std::string method, target, version;
        in >> method >> target >> version;
        if (method.empty() || target.empty() || target[0] != '/' ||
            version.rfind("HTTP/1.", 0) != 0)
          return self->reply({400, "text/plain", "bad request line\n"});
        if (method != "GET") return self->reply({405, "text/plain", "GET only\n"});
        const auto q = target.find('?');
        if (q != std::string::npos) target.resize(q);
        self->reply(self->srv.serve(target));
      });
    }

    void reply(const http_response& r) {
      if (r.code >= 400) srv.bad += 1;
      srv.answered += 1;
      out = "HTTP/1.1 " + std::to_string(r.code) + " " + reason(r.code) +
            "\r\nContent-Type: " + r.content_type +
            "\r\nContent-Length: " + std::to_string(r.body.size()) +
            "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n" + r.body;
      auto self = shared_from_this();
      asio::async_write(sock, asio::buffer(out), [self](const error_code&, size_t) {
        error_code ignored;
        self->sock.shutdown(tcp::socket::shutdown_both, ignored);
        self->sock.close(ignored);
      });
    }
  };

  void accept_next() {
    acceptor.async_accept([this](const error_code& ec, tcp::socket s) {
      if (ec == asio::error::operation_aborted) return;
      if (!ec) std::make_shared<connection>(*this, std::move(s))->start();
      accept_next();
    });
  }
};

http_server::http_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

result<std::unique_ptr<http_server>> http_server::start(const std::string& host, uint16_t port,
                                                        handler h) {
  auto p = std::make_unique<impl>();
  p->serve = std::move(h);
  if (auto st = listen_on(p->acceptor, host, port, "metrics server"); !st.ok()) return st;
  p->accept_next();
  p->runner = std::thread([raw = p.get()] { raw->io.run(); });
  return std::unique_ptr<http_server>(new http_server(std::move(p)));
}

http_server::~http_server() {
  impl_->io.stop();
  if (impl_->runner.joinable()) impl_->runner.join();
}

uint16_t http_server::port() const {
  error_code ec;
  const auto ep = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

uint64_t http_server::requests() const {
  return impl_->answered.load();
}

uint64_t http_server::bad_requests() const {
  return impl_->bad.load();
}

}  // namespace diloco
