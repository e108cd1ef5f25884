"""Starting and stopping a real `ferry serve` on a free loopback port for the server tests."""
import os
import re
import signal
import socket
import subprocess
import threading
import time

import httpx

from conftest import default_model, ferry_bin


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *args, api_key=None, model=None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        cmd = [ferry_bin(), "serve", "-m", model or default_model(), "--port", str(self.port), *map(str, args)]
        if api_key:
            cmd += ["--api-key", api_key]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # The server writes a line per request; a pipe nobody reads fills at 64 KiB and then
        # blocks the server's next write, so the output is drained as it comes.
        self._lines = []
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        self.first_health = None
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                raise AssertionError(f"ferry serve exited: {self.output()}")
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

    def _drain(self):
        for line in self.proc.stdout:
            self._lines.append(line)

    def raw_output(self) -> bytes:
        """Everything the server has printed so far (all of it once it has stopped)."""
        return b"".join(self._lines)

    def output(self) -> str:
        return self.raw_output().decode("utf-8", errors="backslashreplace")

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def metrics(self) -> dict:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            m = re.match(r"^([a-zA-Z0-9_:]+)\{(.*)\} (\S+)$", line)  # a label value may hold braces
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
        self._reader.join(timeout=5)
        return self.proc.returncode
