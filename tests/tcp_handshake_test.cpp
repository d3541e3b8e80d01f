// The authentication every connection between workers passes
// (src/transport/tcp/handshake.hpp), the framed reads and writes after it,
// and the cluster token. First the protocol in memory (replay, reflection,
// wrong token, another job), then over loopback sockets: a server that
// refuses a wrong token, random bytes, a truncated hello, a silent client
// and a 2^40-byte length prefix, and still serves the next good client.
// No actor system: suite 'unit', so it runs under ThreadSanitizer too.

#include "cluster_resolver/cluster_token.hpp"
#include "transport/tcp/authenticate.hpp"
#include "transport/tcp/frame.hpp"

#include "allocation_counter.hpp"
#include "file_support.hpp"
#include "special_files.hpp"
#include "test_support.hpp"

#include "lockstep/error.hpp"

#include <doctest/doctest.h>

#include <tuple>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>

#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace lockstep;
using namespace lockstep::detail;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

bytes token_of(const std::string& text) {
  return {text.begin(), text.end()};
}

const bytes token = token_of("0123456789abcdef0123456789abcdef");
const bytes other_token = token_of("fedcba9876543210fedcba9876543210");

/// A handshake in memory; returns the client's and the server's view.
std::pair<authenticated_peer, authenticated_peer> handshake_in_memory(
  client_handshake& client, server_handshake& server) {
  const auto hello = client.hello();
  const std::span<const std::uint8_t> head(hello.data(), hello_head_size);
  const auto job = std::span<const std::uint8_t>(hello).subspan(hello_head_size);
  const auto challenge = server.challenge(head, job);
  const auto response = client.respond(challenge);
  const auto acceptance = server.accept(response);
  return {client.finish(acceptance), server.peer()};
}

/// The server's challenge to the client's hello.
bytes challenge_to(client_handshake& client, server_handshake& server) {
  const auto hello = client.hello();
  return server.challenge(std::span(hello).first(hello_head_size),
                          std::span(hello).subspan(hello_head_size));
}

std::string refusal_of(const std::function<void()>& f) {
  return error_of<handshake_refused>(f);
}

} // namespace

TEST_CASE("handshake in memory: both sides prove the token and share a session key") {
  client_handshake client{token, {"job-1", 3, 2}};
  server_handshake server{token, {"job-1", 3, 0}};
  const auto [seen_by_client, seen_by_server] = handshake_in_memory(client, server);
  CHECK(seen_by_client.rank == 0);
  CHECK(seen_by_server.rank == 2);
  CHECK(seen_by_client.session_key == seen_by_server.session_key);

  // A second connection of the same pair gets another session key.
  client_handshake again{token, {"job-1", 3, 2}};
  server_handshake server_again{token, {"job-1", 3, 0}};
  CHECK(handshake_in_memory(again, server_again).first.session_key
        != seen_by_client.session_key);
}

TEST_CASE("handshake in memory: what is refused") {
  SUBCASE("a server without the token: the client rejects its proof") {
    client_handshake client{token, {"job", 0, 1}};
    server_handshake server{other_token, {"job", 0, 0}};
    const auto challenge = challenge_to(client, server);
    CHECK(contains(refusal_of([&] { client.respond(challenge); }), "server's proof"));
  }
  SUBCASE("a client without the token: the server rejects its proof") {
    client_handshake client{other_token, {"job", 0, 1}};
    server_handshake server{token, {"job", 0, 0}};
    const auto challenge = challenge_to(client, server);
    // The client sees the server's proof fail, but a hostile client would
    // answer anyway: a response made with the wrong token is refused.
    const auto forged = hmac_sha256(other_token, {challenge});
    CHECK(contains(refusal_of([&] { server.accept(forged); }), "client's proof"));
  }
  SUBCASE("a replayed recording of a good handshake") {
    client_handshake client{token, {"job", 0, 1}};
    server_handshake first{token, {"job", 0, 0}};
    const auto hello = client.hello();
    const auto head = std::span(hello).first(hello_head_size);
    const auto job = std::span(hello).subspan(hello_head_size);
    const auto response = client.respond(first.challenge(head, job));
    first.accept(response); // the original succeeds
    server_handshake second{token, {"job", 0, 0}};
    second.challenge(head, job); // a fresh server nonce
    CHECK(contains(refusal_of([&] { second.accept(response); }), "client's proof"));
  }
  SUBCASE("the server's own proof reflected back as a response") {
    client_handshake client{token, {"job", 0, 1}};
    server_handshake server{token, {"job", 0, 0}};
    const auto challenge = challenge_to(client, server);
    CHECK(contains(refusal_of([&] { server.accept(std::span(challenge).subspan(36)); }),
                   "client's proof"));
  }
  SUBCASE("another job, another generation, another protocol, no hello at all") {
    client_handshake client{token, {"job-a", 1, 1}};
    auto hello = client.hello();
    const auto head = std::span(hello).first(hello_head_size);
    const auto job = std::span(hello).subspan(hello_head_size);
    server_handshake other_job{token, {"job-b", 1, 0}};
    CHECK(contains(refusal_of([&] { other_job.challenge(head, job); }), "job id"));
    server_handshake other_generation{token, {"job-a", 2, 0}};
    CHECK(contains(refusal_of([&] { other_generation.challenge(head, job); }), "generation 1"));
    server_handshake server{token, {"job-a", 1, 0}};
    hello[4] = 9;
    CHECK(contains(refusal_of([&] { server.job_id_length(head); }), "protocol 9"));
    bytes noise(hello_head_size, 0x5a);
    CHECK(contains(refusal_of([&] { server.job_id_length(noise); }), "no lockstep hello"));
  }
  SUBCASE("a hello for another purpose: a mesh connection is no ring connection, nor the "
          "other way round") {
    using enum connection_purpose;
    for (const auto& [client_purpose, server_purpose, words] :
         {std::tuple{mesh, ring, "a hello for a mesh connection where this side awaits a ring "
                                 "connection"},
          std::tuple{ring, mesh, "a hello for a ring connection where this side awaits a mesh "
                                 "connection"},
          std::tuple{control, ring, "a hello for a control connection"}}) {
      client_handshake client{token, {"job", 0, 1, client_purpose}};
      const auto hello = client.hello();
      server_handshake server{token, {"job", 0, 0, server_purpose}};
      CHECK(contains(refusal_of([&] {
                       server.challenge(std::span(hello).first(hello_head_size),
                                        std::span(hello).subspan(hello_head_size));
                     }),
                     words));
    }
    client_handshake client{token, {"job", 0, 1, mesh}};
    auto hello = client.hello();
    hello[hello_head_size - 2] = 7;
    server_handshake server{token, {"job", 0, 0, mesh}};
    CHECK(contains(refusal_of([&] {
                     server.challenge(std::span(hello).first(hello_head_size),
                                      std::span(hello).subspan(hello_head_size));
                   }),
                   "a hello of unknown purpose 7"));
    // The same purpose on both sides passes.
    client_handshake same{token, {"job", 0, 1, mesh}};
    server_handshake mesh_server{token, {"job", 0, 0, mesh}};
    CHECK(challenge_to(same, mesh_server).size() == challenge_size);
  }
  SUBCASE("a token too short to be one") {
    CHECK_THROWS_AS(client_handshake(token_of("short"), {"job", 0, 0}), std::invalid_argument);
  }
}

// -- over loopback sockets -----------------------------------------------------------------

namespace {

/// A server on 127.0.0.1 that authenticates connections one after another
/// and records how each ended ("ok rank N", or the reason it refused).
class test_server {
public:
  test_server(bytes server_token, handshake_identity self, std::size_t connections,
              std::chrono::milliseconds timeout = 2s)
    : acceptor_(context_, {asio::ip::make_address("127.0.0.1"), 0}),
      thread_([this, server_token, self, connections, timeout] {
        for (std::size_t i = 0; i < connections; ++i) {
          tcp_socket socket(context_);
          acceptor_.accept(socket);
          std::string outcome;
          try {
            const auto peer =
              authenticate_server(socket, server_token, self, io_clock::now() + timeout);
            outcome = "ok rank " + std::to_string(peer.rank);
            // Then echo one frame, so the client can see the connection works.
            const auto request = read_frame(socket, 1024, io_clock::now() + timeout);
            write_frame(socket, request.kind + 1, request.payload, io_clock::now() + timeout);
          } catch (const handshake_refused& e) {
            outcome = std::string("refused: ") + e.what();
          } catch (const connection_closed& e) {
            outcome = std::string("closed: ") + e.what();
          } catch (const timeout_error& e) {
            outcome = std::string("timeout: ") + e.what();
          } catch (const frame_too_large& e) {
            outcome = std::string("frame: ") + e.what();
          }
          std::lock_guard lock{mutex_};
          outcomes_.push_back(outcome);
        }
      }) {}

  ~test_server() { join(); }

  std::string address() const {
    return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

  tcp_socket connect() {
    tcp_socket socket(client_context_);
    socket.connect(acceptor_.local_endpoint());
    return socket;
  }

  /// Waits for the server thread and returns the outcomes.
  std::vector<std::string> outcomes() {
    join();
    std::lock_guard lock{mutex_};
    return outcomes_;
  }

private:
  void join() {
    if (thread_.joinable())
      thread_.join();
  }

  asio::io_context context_;
  asio::io_context client_context_;
  asio::ip::tcp::acceptor acceptor_;
  std::mutex mutex_;
  std::vector<std::string> outcomes_;
  std::thread thread_;
};

/// Authenticates as a client and exchanges one frame.
std::string client_round_trip(test_server& server, const bytes& client_token,
                              const handshake_identity& self) {
  auto socket = server.connect();
  const auto deadline = io_clock::now() + 2s;
  const auto peer = authenticate_client(socket, client_token, self, server.address(), deadline);
  const bytes payload{1, 2, 3};
  write_frame(socket, 7, payload, deadline);
  const auto reply = read_frame(socket, 1024, deadline);
  CHECK(reply.kind == 8);
  CHECK(reply.payload == payload);
  return "ok rank " + std::to_string(peer.rank);
}

} // namespace

TEST_CASE("over loopback: good clients get in, the others are refused, the server keeps serving") {
  const handshake_identity server_id{"job-7", 0, 0};
  test_server server(token, server_id, 6, 500ms);

  CHECK(client_round_trip(server, token, {"job-7", 0, 1}) == "ok rank 0");

  // A client with another token: the server's proof fails on the client.
  const auto failed = error_of<authentication_error>(
    [&] { client_round_trip(server, other_token, {"job-7", 0, 2}); });
  CHECK(failed == "authentication with " + server.address()
                    + " failed: it did not prove the cluster token");

  // A client of another job: the server closes, the client is refused.
  const auto refused = error_of<authentication_error>(
    [&] { client_round_trip(server, token, {"job-8", 0, 3}); });
  CHECK(contains(refused, "authentication with " + server.address() + " was refused"));

  { // Random bytes instead of a hello.
    auto socket = server.connect();
    const bytes noise(200, 0xab);
    write_all(socket, {noise}, io_clock::now() + 1s);
  }
  { // A truncated hello, then the connection closes.
    client_handshake client{token, {"job-7", 0, 4}};
    const auto hello = client.hello();
    auto socket = server.connect();
    write_all(socket, {std::span(hello).first(20)}, io_clock::now() + 1s);
  }
  // And still: a good client.
  CHECK(client_round_trip(server, token, {"job-7", 0, 5}) == "ok rank 0");

  const auto outcomes = server.outcomes();
  REQUIRE(outcomes.size() == 6);
  CHECK(outcomes[0] == "ok rank 1");
  CHECK(contains(outcomes[1], "closed")); // the client hung up after the server's proof failed
  CHECK(contains(outcomes[2], "refused: job id"));
  CHECK(contains(outcomes[3], "refused: the first bytes are no lockstep hello"));
  CHECK(contains(outcomes[4], "closed"));
  CHECK(outcomes[5] == "ok rank 5");
}

TEST_CASE("over loopback: a silent client and a huge length prefix cost a deadline, not memory") {
  test_server server(token, {"job", 0, 0}, 2, 300ms);
  auto silent = server.connect(); // sends nothing
  {
    auto socket = server.connect();
    const auto deadline = io_clock::now() + 2s;
    // A good client whose first frame claims 2^40 bytes.
    authenticate_client(socket, token, {"job", 0, 1}, server.address(), deadline);
    std::array<std::uint8_t, frame_header_size> header{};
    header[4 + 5] = 1; // length 2^40
    const auto before = allocation_counter::peak.load();
    write_all(socket, {header}, deadline);
    const auto outcomes = server.outcomes();
    REQUIRE(outcomes.size() == 2);
    CHECK(contains(outcomes[0], "timeout"));
    CHECK(outcomes[1] == "frame: a frame of 1099511627776 bytes exceeds the limit of 1024");
    if (allocation_counter::active())
      CHECK(allocation_counter::peak.load() - before < (1u << 20));
  }
}

TEST_CASE("read_frame and write_frame: an empty frame, and a peer that closes mid-frame") {
  asio::io_context context;
  asio::ip::tcp::acceptor acceptor(context, {asio::ip::make_address("127.0.0.1"), 0});
  tcp_socket client(context);
  client.connect(acceptor.local_endpoint());
  tcp_socket server(context);
  acceptor.accept(server);
  const auto deadline = io_clock::now() + 2s;
  write_frame(client, 3, {}, deadline);
  const auto empty = read_frame(server, 16, deadline);
  CHECK(empty.kind == 3);
  CHECK(empty.payload.empty());
  const bytes half{1, 2};
  std::array<std::uint8_t, frame_header_size> header{};
  header[4] = 10; // promises 10 bytes, sends 2
  write_all(client, {header, half}, deadline);
  client.close();
  CHECK_THROWS_AS(read_frame(server, 16, deadline), connection_closed);
}

// -- the token -------------------------------------------------------------------------------

TEST_CASE("cluster token: a file only its owner may read, or a variable; at least 16 bytes") {
  const temporary_directory folder("tcp_handshake");
  const auto path = folder.path() / "token";
  { std::ofstream{path} << "0123456789abcdef0123\n"; }
  ::chmod(path.c_str(), 0644);
  const auto open_to_others = error_of<value_error>([&] { read_token_file(path); });
  CHECK(contains(open_to_others, "may be read or written by others (mode 0644): chmod 600"));
  ::chmod(path.c_str(), 0600);
  CHECK(read_token_file(path) == token_of("0123456789abcdef0123")); // the newline trimmed
  CHECK(load_cluster_token({{"LOCKSTEP_CLUSTER_TOKEN_FILE", path.string()}})
        == token_of("0123456789abcdef0123"));
  CHECK(load_cluster_token({{"LOCKSTEP_CLUSTER_TOKEN", "abcdefghijklmnopq"}})
        == token_of("abcdefghijklmnopq"));
  CHECK_FALSE(load_cluster_token({}));
  CHECK(contains(error_of<value_error>([] { load_cluster_token({{"LOCKSTEP_CLUSTER_TOKEN", "x"}}); }),
                 "LOCKSTEP_CLUSTER_TOKEN holds a token of 1 bytes"));
  CHECK(contains(error_of<value_error>([&] { read_token_file(folder.path() / "none"); }),
                 "cannot be opened"));
  const auto fresh = generate_cluster_token();
  CHECK(fresh.size() == 64);
  CHECK(fresh != generate_cluster_token());
}

TEST_CASE("cluster token: a symbolic link is followed, and the checks apply to the file read") {
  // A Kubernetes Secret volume: token -> ..data/token, ..data -> ..2026_.../
  const temporary_directory folder("tcp_handshake");
  const auto version = folder.path() / "..2026_01_01_00_00_00.123456789";
  std::filesystem::create_directory(version);
  const auto target = version / "token";
  { std::ofstream{target} << "0123456789abcdef0123\n"; }
  std::filesystem::create_directory_symlink(version.filename(), folder.path() / "..data");
  const auto link = folder.path() / "token";
  std::filesystem::create_symlink("..data/token", link);

  ::chmod(target.c_str(), 0600);
  CHECK(read_token_file(link) == token_of("0123456789abcdef0123"));
  ::chmod(target.c_str(), 0400); // a Secret's defaultMode: 0400
  CHECK(load_cluster_token({{"LOCKSTEP_CLUSTER_TOKEN_FILE", link.string()}})
        == token_of("0123456789abcdef0123"));
  ::chmod(target.c_str(), 0644); // a Secret's default mode
  CHECK(contains(error_of<value_error>([&] { read_token_file(link); }),
                 "may be read or written by others (mode 0644): chmod 600"));
  std::filesystem::remove(target);
  CHECK(contains(error_of<value_error>([&] { read_token_file(link); }), "cannot be opened"));
}

TEST_CASE("cluster token: a FIFO, a link to one, a device, a socket or a directory is refused "
          "without blocking") {
  const temporary_directory folder("tcp_handshake");
  const special_files files(folder.path());
  for (const auto& file : files.all()) {
    CAPTURE(file.path);
    // A FIFO without a writer would block a plain open: the child's alarm
    // turns that into a failure instead of a hang.
    const auto result = run_in_bounded_child(10, [&] {
      return message_of<value_error>([&] { read_token_file(file.path); });
    });
    CHECK_MESSAGE(exited_with(result, 0), describe_end(result));
    CHECK(contains(result.report, "is " + file.type + ", not a regular file"));
  }
}

TEST_CASE("a cluster across hosts needs a token; one host does not") {
  const auto spec = [](const cluster_resolver::environment& env) {
    return cluster_resolver({}, env).spec();
  };
  const auto two_hosts = spec({{"TF_CONFIG", R"({"cluster": {"worker": ["h1:1", "h2:1"]},
                                                  "task": {"type": "worker", "index": 0}})"}});
  CHECK(spans_hosts(two_hosts));
  CHECK(contains(error_of<value_error>([&] { require_token(two_hosts, std::nullopt); }),
                 "spans several hosts but has no cluster token"));
  CHECK_NOTHROW(require_token(two_hosts, token));
  const auto one_host = spec({{"TF_CONFIG", R"({"cluster": {"worker": ["localhost:1",
                                 "127.0.0.1:2"]}, "task": {"type": "worker", "index": 0}})"}});
  CHECK_FALSE(spans_hosts(one_host));
  CHECK_NOTHROW(require_token(one_host, std::nullopt));
  const auto torch_nodes = spec({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "1"}});
  CHECK(spans_hosts(torch_nodes));
}
