"""`ferry bench serve --soak`: a short soak against a real server passes its own checks (nothing
lost, every fault answered right, the server back to idle), /metrics parses with Prometheus' own
parser, and against a server that loses requests and leaks memory the soak fails and says so."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import run_ferry
from server_util import Server

SCENARIOS = {"stream", "chat", "disconnect", "slow_reader", "malformed", "oversized",
             "bad_schema", "too_long"}


def test_metrics_parse_with_prometheus_client_and_carry_process_figures():
    s = Server("--max-num-seqs", "2")
    try:
        text = httpx.get(s.url + "/metrics", timeout=10).text
        families = {f.name: f for f in text_string_to_metric_families(text)}
        for name in ("process_resident_memory_bytes", "process_open_fds", "process_threads",
                     "process_max_fds", "process_start_time_seconds"):
            assert name in families, name
            assert families[name].samples[0].value > 0, name
        # Read /proc independently: the server's own figures are its process's.
        with open(f"/proc/{s.proc.pid}/status") as f:
            threads = int(next(line for line in f if line.startswith("Threads:")).split()[1])
        assert families["process_threads"].samples[0].value == threads
        assert families["process_cpu_seconds"].type == "counter"
    finally:
        s.stop()


# A timed soak of a real server: `make soak` runs it by hand; CI's integration run leaves it out
# (its 25 minutes), and keeps the soak's checks against the losing server below.
@pytest.mark.soak
def test_soak_against_ferry_serve_passes():
    # Four sequences at a time, 8 clients (32 in bursts): the server runs past its capacity.
    s = Server("--max-num-seqs", "4", "--ctx", "512")
    try:
        r = run_ferry("bench", "serve", "--url", s.url, "--soak", "16s", "--soak-clients", "8",
                      "--burst-every", "6", "--burst-seconds", "2", "--warmup", "4",
                      "--output-len", "4", "16", "--input-len", "8", "48", "--json", timeout=180)
        assert r.returncode == 0, r.stderr + r.stdout
        j = json.loads(r.stdout)
        assert j["passed"] and all(c["ok"] for c in j["checks"]), j["checks"]
        assert j["outcomes"]["lost"] == 0 and j["outcomes"]["wrong"] == 0
        assert set(j["by_scenario"]) == SCENARIOS
        assert j["by_scenario"]["disconnect"]["disconnected"] > 0
        for bad in ("malformed", "oversized", "bad_schema", "too_long"):
            assert j["by_scenario"][bad].get("rejected", 0) > 0, bad
        assert j["samples_over_capacity"] > 0 and j["running_max"] <= 4
        assert len(j["series"]) >= 16 and all(x["health"] for x in j["series"])
        assert j["idle_after"]["kv_used_blocks"] == 0
        assert "soak" in r.stderr  # progress every 10 s
        # The server counted the hang-ups as disconnects (aborted, not generated to the end).
        assert s.metrics()["ferry:http_client_disconnects_total"] > 0
    finally:
        s.stop()


class _LosingServer(BaseHTTPRequestHandler):
    """Answers like a server, but drops every stream mid-way and leaks 64 MiB a second."""
    protocol_version = "HTTP/1.1"
    rss = [100 << 20]

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self._send(200, json.dumps({"data": [{"id": "m", "max_model_len": 64}]}))
        if self.path == "/health":
            return self._send(200, "{}")
        self.rss[0] += 64 << 20
        return self._send(200, f"process_resident_memory_bytes {self.rss[0]}\n"
                               "process_open_fds 10\nprocess_threads 3\n", "text/plain")

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        if n > (1 << 20):  # before reading: the soak sends a little of a 1 GiB body and waits
            return self._send(413, json.dumps({"error": {"message": "too large"}}))
        body = self.rfile.read(n)
        try:
            j = json.loads(body)
        except ValueError:
            return self._send(400, json.dumps({"error": {"message": "bad json"}}))
        if j.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b'data: {"choices": [{"text": "a"}]}\n\n')
            self.close_connection = True
            return
        return self._send(400, json.dumps({"error": {"message": "no"}}))


def test_soak_fails_on_a_server_that_loses_requests_and_leaks():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _LosingServer)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        r = run_ferry("bench", "serve", "--url", f"http://127.0.0.1:{httpd.server_port}",
                      "--soak", "8", "--soak-clients", "2", "--warmup", "1", "--json",
                      timeout=120)
        assert r.returncode != 0
        assert "soak failed" in r.stderr
        j = json.loads(r.stdout)
        failed = {c["check"] for c in j["checks"] if not c["ok"]}
        assert {"no request lost", "resident memory flat"} <= failed, j["checks"]
        assert "open descriptors flat" not in failed
        assert j["outcomes"]["lost"] > 0 and j["problems"]
    finally:
        httpd.shutdown()


def test_soak_refuses_a_bad_duration():
    r = run_ferry("bench", "serve", "--soak", "ten minutes")
    assert r.returncode != 0 and "not a duration" in r.stderr
