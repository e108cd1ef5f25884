"""`ferry bench serve` as a load generator for any OpenAI-compatible server: chat and completion
routes, an OpenAI client's base URL, request-rate sweeps, the repository's chat dataset, and
servers that frame their streams as llama.cpp's and uvicorn do (chunked transfer encoding, chunk
boundaries inside events, no usage in the stream, early stops). `--plot` draws the JSON."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from conftest import run_ferry
from server_util import Server

ROOT = Path(__file__).resolve().parents[2]
CHAT_DATASET = ROOT / "bench" / "datasets" / "chat-turns.jsonl"


def test_chat_dataset_lines_are_well_formed():
    lines = [json.loads(line) for line in CHAT_DATASET.read_text().splitlines() if line.strip()]
    assert len(lines) >= 100
    turns = []
    for line in lines:
        roles = [m["role"] for m in line["messages"]]
        # History alternates user / assistant and ends with the user's turn to answer.
        assert roles[0] == "user" and roles[-1] == "user"
        assert all(a != b for a, b in zip(roles, roles[1:]))
        assert 8 <= line["output_len"] <= 512
        turns.append(len(roles) // 2 + 1)
    # The lengths follow LMSYS-Chat-1M's means (scripts/make-chat-dataset.py says how).
    assert 1.5 <= sum(turns) / len(turns) <= 2.5
    mean_out = sum(line["output_len"] for line in lines) / len(lines)
    assert 170 <= mean_out <= 260


def test_against_ferry_chat_and_completions_with_a_rate_sweep(tmp_path):
    s = Server("--max-num-seqs", "4")
    try:
        # The repository's chat dataset, through an OpenAI client's base URL (.../v1), with
        # short answers asked so the test stays quick.
        lines = [json.loads(x) for x in CHAT_DATASET.read_text().splitlines()[:4]]
        for i, line in enumerate(lines):
            line["output_len"] = 3 + i
        p = tmp_path / "chat.jsonl"
        p.write_text("".join(json.dumps(x) + "\n" for x in lines))
        r = run_ferry("bench", "serve", "--base-url", s.url + "/v1", "--dataset", p,
                      "--num-prompts", 4, "--json", timeout=180)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["bench"] == "serve" and j["endpoint"] == "/v1/chat/completions"
        assert j["request_url"] == s.url + "/v1/chat/completions"
        assert j["model"], "the model the server names in /v1/models"
        assert j["completed"] == 4 and j["failed"] == 0
        # ignore_eos: exactly the lengths asked, counted by the server's usage.
        assert j["total_output_tokens"] == 3 + 4 + 5 + 6
        assert j["usage_reported"] == 4 and j["short_outputs"] == 0
        assert len(j["requests"]) == 4
        assert sorted(x["output_tokens"] for x in j["requests"]) == [3, 4, 5, 6]
        # The prompt is the chat template around the history: longer than its words.
        assert all(x["prompt_tokens"] > 10 for x in j["requests"])

        # Completions at two rates, each its own run with its own figures.
        r = run_ferry("bench", "serve", "--url", s.url, "--num-prompts", 5, "--input-len", 8, 16,
                      "--output-len", 4, "--request-rate", "40,inf", "--shared-prefix-len", 30,
                      "--slo-ttft-ms", 60000, "--json", timeout=180)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["endpoint"] == "/v1/completions" and j["shared_prefix_len"] == 30
        assert [x["request_rate"] for x in j["runs"]] == ["40", "inf"]
        for run in j["runs"]:
            assert run["completed"] == 5 and run["total_output_tokens"] == 20
            assert run["goodput"] > 0 and run["slo_met_fraction"] == 1.0
            assert all(x["prompt_tokens"] > 30 for x in run["requests"])
        # Each rate sends prompts of its own, so the second does not find the first's cached.
        lens = [[x["prompt_tokens"] for x in run["requests"]] for run in j["runs"]]
        assert lens[0] != lens[1]
    finally:
        s.stop()


class _OtherServer(BaseHTTPRequestHandler):
    """Streams as llama.cpp's server and uvicorn do: chunked transfer encoding, here with every
    chunk boundary in the middle of an event, and no usage in the stream. `stop_early` stops
    before max_tokens, as a server that does not take ignore_eos does."""
    protocol_version = "HTTP/1.1"
    stop_early = False
    bodies = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "other-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append((self.path, req))
        n = req["max_tokens"] // 2 if self.stop_early else req["max_tokens"]
        chat = self.path.endswith("/chat/completions")
        events = b""
        for i in range(n):
            c = {"delta": {"content": f" w{i}"}} if chat else {"text": f" w{i}"}
            events += b"data: " + json.dumps({"choices": [c]}).encode() + b"\r\n\r\n"
        events += b"data: [DONE]\r\n\r\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for k in range(0, len(events), 7):  # 7-byte chunks: boundaries fall inside events
            piece = events[k:k + 7]
            self.wfile.write(f"{len(piece):X}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")


def _serve(handler):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def test_chunked_streams_without_usage_are_counted_by_chunks():
    _OtherServer.bodies = []
    httpd = _serve(_OtherServer)
    try:
        r = run_ferry("bench", "serve", "--base-url", f"http://127.0.0.1:{httpd.server_port}/v1",
                      "--endpoint", "chat", "--num-prompts", 3, "--output-len", 5, "--json",
                      timeout=60)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["completed"] == 3 and j["total_output_tokens"] == 15
        assert j["usage_reported"] == 0 and "reported no token usage" in r.stderr
        assert j["model"] == "other-model"
        path, body = _OtherServer.bodies[0]
        assert path == "/v1/chat/completions"
        assert body["model"] == "other-model" and body["ignore_eos"] is True
        assert body["stream"] is True and body["max_tokens"] == 5
        assert body["messages"][0]["role"] == "user"
    finally:
        httpd.shutdown()


def test_a_server_that_stops_early_is_reported():
    class Early(_OtherServer):
        stop_early = True
    httpd = _serve(Early)
    try:
        r = run_ferry("bench", "serve", "--url", f"http://127.0.0.1:{httpd.server_port}",
                      "--num-prompts", 2, "--output-len", 8, "--no-ignore-eos", "--json",
                      timeout=60)
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["total_output_tokens"] == 8 and j["short_outputs"] == 2
        assert "shorter than asked" in r.stderr
        assert "ignore_eos" not in Early.bodies[-1][1]
    finally:
        httpd.shutdown()


def test_bad_targets_and_datasets_get_clear_errors(tmp_path):
    def fails(args, word):
        r = run_ferry("bench", "serve", *args, timeout=60)
        assert r.returncode != 0 and word in r.stderr, r.stderr

    fails(["--url", "https://127.0.0.1:1", "--num-prompts", 1], "https is not supported")
    fails(["--url", "http://127.0.0.1:99999", "--num-prompts", 1], "bad port")
    fails(["--url", "http://127.0.0.1:1", "--num-prompts", 1, "--endpoint", "embeddings"],
          "--endpoint")
    fails(["--url", "http://127.0.0.1:1", "--request-rate", "2,fast"], "fast")
    # The soak's faults only go to this machine.
    fails(["--url", "http://192.0.2.1:80", "--soak", "5"], "only targets a server on this machine")
    p = tmp_path / "mixed.jsonl"
    p.write_text(json.dumps({"prompt": "a"}) + "\n" +
                 json.dumps({"messages": [{"role": "user", "content": "b"}]}) + "\n")
    fails(["--url", "http://127.0.0.1:1", "--dataset", p], "every line")
    p.write_text(json.dumps({"messages": [{"role": "user"}]}) + "\n")
    fails(["--url", "http://127.0.0.1:1", "--dataset", p], "line 1")
    p.write_text(json.dumps({"prompt": "a", "output_len": 0}) + "\n")
    fails(["--url", "http://127.0.0.1:1", "--dataset", p], "output_len")
    # Nobody listening: every request fails and the run says so.
    fails(["--url", "http://127.0.0.1:1", "--num-prompts", 2], "no request completed")


def test_plots_of_each_bench(tmp_path):
    httpd = _serve(_OtherServer)
    try:
        html = tmp_path / "serve.html"
        r = run_ferry("bench", "serve", "--url", f"http://127.0.0.1:{httpd.server_port}",
                      "--num-prompts", 3, "--output-len", 4, "--request-rate", "50,inf",
                      "--plot", html, timeout=60)
        assert r.returncode == 0, r.stderr
        page = html.read_text()
        assert page.startswith("<!doctype html>") and "data:image/png;base64," in page
        assert "output tok/s" in page  # the table of numbers beside the figure
        png = tmp_path / "serve.png"
        r = run_ferry("bench", "serve", "--url", f"http://127.0.0.1:{httpd.server_port}",
                      "--num-prompts", 3, "--output-len", 4, "--plot", png, timeout=60)
        assert r.returncode == 0, r.stderr
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        httpd.shutdown()
    svg = tmp_path / "decode.svg"
    r = run_ferry("bench", "decode", "-p", 16, "-n", 8, "-r", 1, "-t", 1, "--plot", svg)
    assert r.returncode == 0, r.stderr
    assert "<svg" in svg.read_text()[:500] and "roofline" in svg.read_text()
    png = tmp_path / "throughput.png"
    r = run_ferry("bench", "throughput", "--num-prompts", 3, "--input-len", 8, "--output-len", 4,
                  "-t", 1, "--plot", png)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = run_ferry("bench", "decode", "--plot", tmp_path / "x.gif")
    assert bad.returncode != 0 and ".png" in bad.stderr
