// Faults behind a real HttpServer listener: a request whose generation fails in the engine, or
// whose handling throws, gets a clear error (a 500, or an error event in a stream that has
// begun) and the server goes on answering the next request.
#include <new>
#include <string>
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
        asio::io_context ioc;
        asio::ip::tcp::socket sock(ioc);
        sock.connect({asio::ip::make_address("127.0.0.1"), uint16_t(server_->port())});
        http::request<http::string_body> req(http::verb::post, path, 11);
        req.set(http::field::host, "127.0.0.1");
        req.set(http::field::content_type, "application/json");
        req.body() = body.dump();
        req.prepare_payload();
        http::write(sock, req);
        boost::beast::flat_buffer buf;
        http::response<http::string_body> res;
        http::read(sock, buf, res);
        return res;
    }

    FaultyService service_;
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

}  // namespace
}  // namespace ferry::server
