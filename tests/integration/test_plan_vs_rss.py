"""`ferry plan --device cpu` against reality: the resident memory of a running `ferry serve`
with the same KV pool must agree with the plan's total within 10 %."""
import json
import re
import subprocess
import time
import urllib.request

from conftest import ferry_bin, run_ferry

POOL = 256 << 20
PORT = 18731


def rss_bytes(pid):
    status = open(f"/proc/{pid}/status").read()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024


def test_serving_memory_matches_plan(model_path):
    proc = subprocess.Popen([ferry_bin(), "serve", "--port", str(PORT), "--kv-cache-memory",
                             str(POOL)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health").status == 200:
                    break
            except Exception:
                time.sleep(0.2)
        body = json.dumps({"prompt": "The capital of France is", "max_tokens": 16}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        assert json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"]
        measured = rss_bytes(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    r = run_ferry("plan", "--device", "cpu", "--kv-cache-memory", POOL, "--json")
    assert r.returncode == 0, r.stderr
    planned = json.loads(r.stdout)["memory"]["total_bytes"]
    print(f"measured RSS {measured / 1e6:.1f} MB, plan {planned / 1e6:.1f} MB")
    assert abs(planned - measured) <= 0.10 * measured, (planned, measured)
