// Faults behind a real HttpServer listener: a request whose generation fails in the engine, or
// whose handling throws, gets a clear error (a 500, or an error event in a stream that has
// begun) and the server goes on answering the next request.
#include <atomic>
#include <chrono>
#include <future>
#include <new>
#include <string>
#include <thread>
#include <utility>  // before Asio, whose awaitable.hpp needs std::exchange

#include <gtest/gtest.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "../fuzz/fuzz_service.h"
#include "server/http_server.h"

namespace ferry::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using json = nlohmann::json;

// The fuzz harness's model-free service, with two faults keyed on the prompt: "FAIL" streams
// two tokens and then ends with FinishReason::Error, as the engine ends a request whose
// processing threw; "THROW" throws std::bad_alloc from add_request itself.
class FaultyService : public fuzz::FuzzService {
  public:
    Expected<engine::RequestId> add_request(std::vector<int32_t> prompt, engine::RequestParams p,
                                            engine::TokenCallback on_token) override {
        const std::string text = decode(prompt);
        if (text.find("THROW") != std::string::npos) throw std::bad_alloc();
        if (text.find("FAIL") == std::string::npos)
            return FuzzService::add_request(std::move(prompt), std::move(p), std::move(on_token));
        engine::TokenEvent ev;
        ev.request = 99;
        for (int i = 0; i < 2; ++i) {
            ev.token = 'a' + 1 + i;
            ev.text = std::string(1, char('a' + i));
            ev.completion_tokens = i + 1;
            on_token(ev);
        }
        ev.token = -1;
        ev.text.clear();
        ev.finished = true;
        ev.finish_reason = engine::FinishReason::Error;
        ev.error = "std::bad_alloc injected";
        on_token(ev);
        return engine::RequestId{99};
    }
};

// A constraint whose compilation takes as long as the test says: it blocks until released.
class SlowCompileService : public FaultyService {
  public:
    Expected<std::shared_ptr<const grammar::CompiledGrammar>> compile_constraint(
        const engine::Constraint& c) const override {
        entered.set_value();
        release.wait();
        return FaultyService::compile_constraint(c);
    }
    mutable std::promise<void> entered;
    std::shared_future<void> release;
};

class HttpFaults : public ::testing::Test {
  protected:
    void SetUp() override {
        ServerOptions o;
        o.port = 0;
        o.model_names = {"m"};
        o.log_requests = false;
        o.handle_signals = false;
        server_ = std::make_unique<HttpServer>(o);
        ASSERT_TRUE(server_->start().ok());
        server_->set_service(&service_);
    }
    void TearDown() override {
        server_->shutdown();
        server_->wait();
    }

    http::response<http::string_body> post(const std::string& path, const json& body) {
        return request(http::verb::post, path, body.dump());
    }
    http::response<http::string_body> request(http::verb verb, const std::string& path,
                                              const std::string& body) {
        asio::io_context ioc;
        asio::ip::tcp::socket sock(ioc);
        sock.connect({asio::ip::make_address("127.0.0.1"), uint16_t(server_->port())});
        http::request<http::string_body> req(verb, path, 11);
        req.set(http::field::host, "127.0.0.1");
        req.set(http::field::content_type, "application/json");
        req.body() = body;
        req.prepare_payload();
        http::write(sock, req);
        boost::beast::flat_buffer buf;
        http::response<http::string_body> res;
        http::read(sock, buf, res);
        return res;
    }

    SlowCompileService service_;
    std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpFaults, EngineErrorIsA500WithTheReason) {
    auto res = post("/v1/completions", {{"prompt", "please FAIL"}, {"max_tokens", 4}});
    EXPECT_EQ(res.result_int(), 500) << res.body();
    const json j = json::parse(res.body());
    EXPECT_EQ(j["error"]["code"], "internal_error");
    EXPECT_NE(j["error"]["message"].get<std::string>().find("std::bad_alloc injected"),
              std::string::npos)
        << res.body();
    // The server goes on serving.
    EXPECT_EQ(post("/v1/completions", {{"prompt", "fine"}, {"max_tokens", 3}}).result_int(), 200);
}

TEST_F(HttpFaults, EngineErrorMidStreamIsAnErrorEventThenDone) {
    auto res =
        post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "FAIL now"}}}},
                                      {"max_tokens", 4},
                                      {"stream", true}});
    ASSERT_EQ(res.result_int(), 200);
    const std::string& b = res.body();
    const size_t first_token = b.find("\"content\":\"a\"");
    const size_t error = b.find("data: {\"error\"");
    const size_t done = b.find("data: [DONE]");
    ASSERT_NE(first_token, std::string::npos) << b;
    ASSERT_NE(error, std::string::npos) << b;
    ASSERT_NE(done, std::string::npos) << b;
    EXPECT_LT(first_token, error);
    EXPECT_LT(error, done);
    EXPECT_NE(b.find("internal_error"), std::string::npos);
    EXPECT_EQ(b.find("\"finish_reason\":\"error\""), std::string::npos)  // not passed off as one
        << b;
}

TEST_F(HttpFaults, HandlerThatThrowsIsA500AndTheServerLivesOn) {
    for (int i = 0; i < 3; ++i) {
        auto res = post("/v1/completions", {{"prompt", "THROW"}, {"max_tokens", 2}});
        EXPECT_EQ(res.result_int(), 500) << res.body();
        EXPECT_NE(res.body().find("std::bad_alloc"), std::string::npos) << res.body();
    }
    auto ok = post("/v1/completions", {{"prompt", "still here"}, {"max_tokens", 2}});
    EXPECT_EQ(ok.result_int(), 200) << ok.body();
}

// A request's preparation (here a constraint's compilation, seconds for a large enum) runs off
// the I/O thread: while it is held, the one I/O thread still answers other connections.
TEST_F(HttpFaults, ASlowRequestPreparationDoesNotHoldOtherConnections) {
    std::promise<void> release;
    service_.release = release.get_future().share();
    std::atomic<bool> released{false};
    auto slow = std::async(std::launch::async, [&] {
        return post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                             {"max_tokens", 2},
                                             {"response_format", {{"type", "json_object"}}}});
    });
    service_.entered.get_future().wait();
    // Let the held request go after a while in any case, so that a server which does block
    // fails this test instead of hanging it.
    std::promise<void> answered;
    std::thread releaser([&, a = answered.get_future()] {
        if (a.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) released = true;
        release.set_value();
    });
    auto models = request(http::verb::get, "/v1/models", "");
    auto other = post("/v1/completions", {{"prompt", "other"}, {"max_tokens", 2}});
    const bool answered_while_held = !released;
    answered.set_value();
    releaser.join();
    EXPECT_TRUE(answered_while_held);
    EXPECT_EQ(models.result_int(), 200) << models.body();
    EXPECT_EQ(other.result_int(), 200) << other.body();
    auto held = slow.get();
    EXPECT_EQ(held.result_int(), 200) << held.body();
}

}  // namespace
}  // namespace ferry::server
