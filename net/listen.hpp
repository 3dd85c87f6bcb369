// Opening a listening socket the way every server of net/ does (SO_REUSEADDR: a restarted node
// gets its port back at once). Only for net/'s own .cpp files: it pulls in Boost.Asio.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/socket_base.hpp>
#include <string>

#include "base/status.hpp"

namespace diloco {

// `what` names the server in errors ("bulk channel", "metrics server", ...).
inline status listen_on(boost::asio::ip::tcp::acceptor& acceptor, const std::string& host,
                        uint16_t port, const std::string& what) {
  using tcp = boost::asio::ip::tcp;
  boost::system::error_code ec;
  const auto address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    return status(errc::invalid_argument,
                  what + ": listen address '" + host + "': " + ec.message());
  }
  const tcp::endpoint at(address, port);
  acceptor.open(at.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(at, ec);
  if (!ec) acceptor.listen(boost::asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return status(errc::io_error, what + ": cannot listen on port " + std::to_string(port) + " (" +
                                      host + "): " + ec.message());
  }
  return ok_status();
}

}  // namespace diloco
