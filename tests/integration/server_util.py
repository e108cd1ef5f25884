"""Starting and stopping a real `ferry serve` on a free loopback port for the server tests."""
import os
import re
import signal
import socket
import subprocess
import time

import httpx

from conftest import default_model, ferry_bin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args, api_key=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        cmd = [ferry_bin(), "serve", "-m", default_model(), "--port", str(self.port), *map(str, args)]
        if api_key:
            cmd += ["--api-key", api_key]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.first_health = None
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, f"ferry serve exited: {self.proc.stdout.read()}"
            try:
                r = httpx.get(self.url + "/health", timeout=2)
                if self.first_health is None:
                    self.first_health = r.status_code
                if r.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.02)
        else:
            raise RuntimeError("ferry serve did not become healthy")

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def metrics(self) -> dict:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z0-9_:]+)\{([^}]*)\} (\S+)$", line)
            if m:
                out[(m.group(1), m.group(2))] = float(m.group(3))
                out.setdefault(m.group(1), float(m.group(3)))
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
