"""The command line as a new user meets it: a prompt answered, a chat, clear errors."""
import json
import os
import struct

from conftest import ferry_bin, run_ferry


def test_greedy_run_answers_the_capital_of_france(model_path):
    r = run_ferry("run", "-m", "default", "-p", "The capital of France is", "-n", "12",
                  "--temperature", "0")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The capital of France is")
    assert "Paris" in r.stdout
    # timings go to stderr, text to stdout
    assert "decode" in r.stderr and "tok/s" in r.stderr
    assert "tok/s" not in r.stdout


def test_no_model_flag_means_default(model_path):
    r = run_ferry("run", "-p", "1, 2, 3, 4,", "-n", "6", "--temperature", "0", "--no-stats")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1, 2, 3, 4, 5")


def test_same_seed_same_output(model_path):
    args = ("run", "-p", "Once upon a time", "-n", "24", "--temperature", "1.0", "--no-stats")
    a = run_ferry(*args, "--seed", "42")
    b = run_ferry(*args, "--seed", "42")
    c = run_ferry(*args, "--seed", "43")
    assert a.returncode == 0 and b.returncode == 0 and c.returncode == 0
    assert a.stdout == b.stdout
    assert a.stdout != c.stdout


def test_chat_flag_uses_template(model_path):
    r = run_ferry("run", "--chat", "-p", "What is the capital of France?", "-n", "24",
                  "--temperature", "0", "--no-stats")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "<|im_start|>" not in r.stdout and "<|im_end|>" not in r.stdout


def test_chat_multi_turn_over_stdin(model_path):
    turns = "What is the capital of France?\nAnd of Germany?\n/exit\n"
    r = run_ferry("chat", "--temperature", "0", "-n", "40", input=turns)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "Berlin" in r.stdout


def test_info_json(model_path):
    import json
    r = run_ferry("info", "--json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["architecture"] == "llama"
    assert j["n_layer"] == 30 and j["n_head"] == 9 and j["n_head_kv"] == 3
    assert j["tensor_types"]["q4_1"]["tensors"] == 210
    assert 130e6 < j["parameters"] < 140e6
    assert j["kv_bytes_per_token"]["f16"] == 2 * 30 * 192 * 2
    assert j["weight_bytes_per_token"] > 50e6


def test_help_on_every_subcommand():
    for sub in (["run"], ["chat"], ["info"], ["plan"], ["bench"], ["bench", "decode"]):
        r = run_ferry(*sub, "--help")
        assert r.returncode == 0, (sub, r.stderr)
        assert "Usage" in r.stdout or "usage" in r.stdout.lower()


def test_unknown_flag_fails_with_message():
    r = run_ferry("run", "-p", "x", "--frobnicate")
    assert r.returncode != 0
    assert "frobnicate" in (r.stderr + r.stdout)


# --- bad input: one line naming the problem, non-zero exit, never a crash -----------------

def expect_clean_error(r, *words):
    assert r.returncode not in (0,) and r.returncode > 0, (r.returncode, r.stderr)
    # Progress lines may come first (the model was loading); the error is one line, the last.
    lines = r.stderr.strip().splitlines()
    errors = [l for l in lines if l.startswith("ferry: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr
    err = errors[0]
    for w in words:
        assert w in err, (w, err)


def test_missing_file(tmp_path):
    expect_clean_error(run_ferry("run", "-m", tmp_path / "nope.gguf", "-p", "x"), "no such file")


def test_not_a_gguf(tmp_path):
    p = tmp_path / "notes.gguf"
    p.write_text("hello, this is not a model\n" * 10)
    expect_clean_error(run_ferry("run", "-m", p, "-p", "x"), "magic")


def test_fifo_as_the_model_is_refused_not_waited_on(tmp_path):
    p = tmp_path / "model.fifo"
    os.mkfifo(p)
    expect_clean_error(run_ferry("info", "-m", p, timeout=30), "not a regular file")


def test_truncated_gguf(tmp_path, model_path):
    data = open(model_path, "rb").read(1 << 20)
    p = tmp_path / "trunc.gguf"
    p.write_bytes(data)
    expect_clean_error(run_ferry("run", "-m", p, "-p", "x"), "trunc")


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def test_unsupported_architecture(tmp_path):
    kv = gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("mamba")
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv
    p = tmp_path / "mamba.gguf"
    p.write_bytes(blob)
    expect_clean_error(run_ferry("run", "-m", p, "-p", "x"), "mamba")


def test_unknown_tensor_type(tmp_path):
    kv = gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("llama")
    tensor = gguf_string("token_embd.weight") + struct.pack("<I", 2) + struct.pack("<QQ", 32, 4)
    tensor += struct.pack("<I", 99) + struct.pack("<Q", 0)
    blob = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + kv + tensor
    blob += b"\0" * ((-len(blob)) % 32) + b"\0" * 4096
    p = tmp_path / "badtype.gguf"
    p.write_bytes(blob)
    expect_clean_error(run_ferry("run", "-m", p, "-p", "x"), "99")


def test_prompt_longer_than_context(model_path):
    r = run_ferry("run", "--ctx", "16", "-p", "word " * 40, "-n", "4")
    expect_clean_error(r, "context")


def test_empty_api_key_is_refused():
    # `--api-key "$UNSET"` must not start a server that lets everyone in.
    expect_clean_error(run_ferry("serve", "--api-key", "", "--port", "0"), "--api-key")


def test_quantize_into_a_directory_fails_before_the_work(tmp_path, model_path):
    r = run_ferry("quantize", "default", tmp_path, "--type", "q8_0", "-q")
    expect_clean_error(r, "is a directory")
    assert list(tmp_path.iterdir()) == [] and not (tmp_path.parent / (tmp_path.name + ".tmp")).exists()


def test_prompt_file_that_is_a_directory(tmp_path, model_path):
    expect_clean_error(run_ferry("run", "-f", tmp_path, "-n", "2"), "is a directory")


def test_more_threads_than_cpus_are_capped(model_path):
    r = run_ferry("run", "-p", "Hi", "-n", "2", "-t", "1024", "--no-stats", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "more than this machine's" in r.stderr


def test_bad_environment_levels_are_named(model_path):
    import subprocess
    for var, val in (("FERRY_CPU_LEVEL", "bogus"), ("FERRY_ACTIVATIONS", "INT8")):
        env = dict(os.environ, **{var: val})
        r = subprocess.run([ferry_bin(), "run", "-p", "Hi", "-n", "2", "--no-stats"], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert f"{var}={val} is not" in r.stderr


def test_chat_commands_are_not_sent_to_the_model(model_path):
    r = run_ferry("chat", "--temperature", "0", "-n", "12",
                  input="/help\n/bogus\nWhat is the capital of France?\n/exit\n")
    assert r.returncode == 0, r.stderr
    assert "unknown command /bogus" in r.stderr and "/reset" in r.stderr
    assert "Paris" in r.stdout and "bogus" not in r.stdout


def test_chat_system_message_larger_than_context(model_path):
    r = run_ferry("chat", "--ctx", "32", "--system", "You are a helpful assistant. " * 10,
                  input="hi\n")
    expect_clean_error(r, "system message", "context")


def test_chat_drops_the_oldest_turns_when_the_context_is_full(model_path):
    turns = ("Tell me about the history of Paris in detail.\n"
             "And what about London, its bridges and its river?\n"
             "What is the capital of Germany?\n/exit\n")
    r = run_ferry("chat", "--ctx", "128", "-n", "40", "--temperature", "0", input=turns)
    assert r.returncode == 0, r.stderr
    assert "dropped the 2 oldest messages to fit the context of 128 tokens" in r.stderr
    assert "Berlin" in r.stdout  # the last question is answered, not refused
    assert "no longer fits" not in r.stderr and "error" not in r.stderr


def test_chat_message_alone_longer_than_the_context_is_refused_and_the_session_goes_on(
        model_path):
    long_line = "word " * 200
    r = run_ferry("chat", "--ctx", "128", "-n", "12", "--temperature", "0",
                  input=f"{long_line}\nWhat is the capital of France?\n/exit\n")
    assert r.returncode == 0, r.stderr
    assert "does not fit the context of 128" in r.stderr and "it was not sent" in r.stderr
    assert "Paris" in r.stdout


class Terminal:
    """`ferry chat` on a pseudo-terminal, as a person types at it (libedit is on)."""

    def __init__(self, *args, env=None):
        import pty
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: become ferry chat
            os.execve(ferry_bin(), ["ferry", "chat", *map(str, args)], env)
        self.buf = b""

    def until(self, text, timeout=90):
        import select
        import time
        want = text.encode()
        end = time.time() + timeout
        while want not in self.buf:
            assert time.time() < end, f"no {text!r} in {self.buf[-600:]!r}"
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                try:
                    self.buf += os.read(self.fd, 4096)
                except OSError:
                    break
        i = self.buf.index(want) + len(want)
        seen, self.buf = self.buf[:i], self.buf[i:]
        return seen.decode(errors="replace")

    def until_match(self, pattern, timeout=90):
        import re
        import select
        import time
        end = time.time() + timeout
        while not re.search(pattern, self.buf):
            assert time.time() < end, f"no {pattern!r} in {self.buf[-600:]!r}"
            r, _, _ = select.select([self.fd], [], [], 0.1)
            if r:
                self.buf += os.read(self.fd, 4096)
        i = re.search(pattern, self.buf).end()
        self.buf = self.buf[i:]

    def type(self, keys):
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def wait(self):
        return os.waitpid(self.pid, 0)[1]


def test_chat_ctrl_c_stops_the_reply_not_the_program_and_lines_have_history(model_path,
                                                                           tmp_path):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path))
    t = Terminal("--temperature", "0", "-n", "400", env=env)
    t.until("Ctrl-C stops a reply")
    t.until("> ")
    t.type("Write a long story about a dragon.\r")
    t.until("Write a long story about a dragon.")
    # The reply has begun (the line was taken, then the reply's first letters arrived): stop it
    # well before it could end by itself. Sent earlier, on a loaded machine the Ctrl-C can land
    # at the prompt still, where it drops the line instead.
    t.until("\n")
    t.until_match(rb"[A-Za-z]")
    t.type("\x03")
    t.until("reply stopped")
    t.until("> ")
    # The conversation is still there: a second question is answered.
    t.type("What is the capital of France?\r")
    assert "Paris" in t.until("> ")
    # Ctrl-C at the prompt drops the line typed so far, and the program goes on.
    t.type("half a line\x03")
    t.until("^C")
    t.until("> ")
    # The up arrow recalls the previous line; /exit ends with status 0.
    t.type("\x1b[A")
    t.until("capital of France?")
    t.type("\x15/exit\r")
    assert t.wait() == 0
    history = (tmp_path / "ferry" / "chat_history").read_text()
    assert "France?" in history.replace("\\040", " ") and "half a line" not in history


def test_device_cuda_without_a_gpu_is_refused_and_auto_falls_back(model_path):
    # This machine has no GPU (CI's do not): --device cuda names what is missing, in a build
    # with or without the CUDA backend; auto runs on the CPU and answers as cpu does.
    r = run_ferry("run", "--device", "cuda", "-p", "The capital of France is", "-n", "4")
    expect_clean_error(r, "--device cuda")
    assert "cuda" in r.stderr.lower()
    args = ("run", "-p", "The capital of France is", "-n", "8", "--temperature", "0", "--no-stats")
    auto = run_ferry(*args, "--device", "auto")
    cpu = run_ferry(*args, "--device", "cpu")
    assert auto.returncode == 0 and cpu.returncode == 0, auto.stderr + cpu.stderr
    assert auto.stdout == cpu.stdout and "Paris" in cpu.stdout
    bad = run_ferry("run", "--device", "tpu", "-p", "x")
    assert bad.returncode != 0 and "tpu" in (bad.stderr + bad.stdout)
    # eval and info take it too; info names the device its costs are for.
    text = os.path.join(os.path.dirname(__file__), "..", "..", "data", "eval", "lighthouse.txt")
    expect_clean_error(run_ferry("eval", "--device", "cuda", "--max-tokens", "16", "--text", text),
                       "--device cuda")
    expect_clean_error(run_ferry("info", "--device", "cuda"), "--device cuda")
    info = run_ferry("info", "--device", "auto", "--json")
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["device"]["backend"] == "cpu"


def test_cuda_graphs_is_refused_on_the_cpu_and_noted_where_auto_finds_no_gpu(model_path):
    # --cuda-graphs only means something to the CUDA backend: on --device cpu it is refused, not
    # ignored; under auto on a machine without a GPU the run goes on with a note saying so.
    args = ("run", "-p", "The capital of France is", "-n", "4", "--temperature", "0", "--no-stats")
    expect_clean_error(run_ferry(*args, "--cuda-graphs", "off"), "--cuda-graphs")
    auto = run_ferry(*args, "--device", "auto", "--cuda-graphs", "off")
    assert auto.returncode == 0, auto.stderr
    assert "--cuda-graphs has no effect" in auto.stderr
    bad = run_ferry(*args, "--device", "auto", "--cuda-graphs", "maybe")
    assert bad.returncode != 0 and "maybe" in (bad.stderr + bad.stdout)


def test_gpu_memory_utilization_is_refused_where_it_would_mean_nothing(model_path):
    # It sizes a GPU's KV pool; on the CPU (every CI machine) the pool is --kv-cache-memory's,
    # so the option is refused rather than silently ignored, and a share outside (0, 1] too.
    r = run_ferry("bench", "throughput", "--gpu-memory-utilization", "0.5", "--num-prompts", "2",
                  "--input-len", "8", "--output-len", "2")
    expect_clean_error(r, "--gpu-memory-utilization")
    assert "--kv-cache-memory" in r.stderr
    bad = run_ferry("bench", "throughput", "--gpu-memory-utilization", "1.5", "--num-prompts", "2")
    assert bad.returncode != 0 and "gpu-memory-utilization" in (bad.stderr + bad.stdout)


def test_sampling_on_the_device_gives_the_host_text(model_path):
    # --sample-on device draws each token beside the logits (Backend::sample) with a number from
    # the same seeded generator the host sampler uses: the same text, truncated or not,
    # penalised or not. (On the CPU "auto" samples on the host, so this compares the two paths.)
    settings = [
        ("--temperature", "1.0", "--top-k", "0", "--top-p", "1", "--min-p", "0"),
        ("--temperature", "0.8", "--top-k", "40", "--top-p", "0.9", "--min-p", "0.05"),
        ("--temperature", "1.2", "--top-k", "0", "--top-p", "0.95", "--repeat-penalty", "1.3",
         "--frequency-penalty", "0.5"),
    ]
    for s in settings:
        args = ("run", "-p", "The old lighthouse keeper", "-n", "32", "--seed", "5", "--no-stats",
                *s)
        device = run_ferry(*args, "--sample-on", "device")
        host = run_ferry(*args, "--sample-on", "host")
        assert device.returncode == 0 and host.returncode == 0, device.stderr + host.stderr
        assert device.stdout == host.stdout, s
    bad = run_ferry("run", "-p", "x", "-n", "2", "--sample-on", "gpu")
    assert bad.returncode != 0 and "--sample-on" in bad.stderr


def test_an_option_without_the_one_it_modifies_is_refused(model_path):
    # Dropped without a word before: --system outside --chat, bench decode's --chat with the
    # synthetic prompt it does not wrap.
    r = run_ferry("run", "-p", "Hi", "-n", "2", "--system", "Be brief.")
    assert r.returncode != 0 and "--system requires --chat" in r.stderr, r.stderr
    r = run_ferry("bench", "decode", "-p", "8", "-n", "2", "-r", "1", "--chat")
    assert r.returncode != 0 and "--chat requires --prompt-file" in r.stderr, r.stderr


def test_a_context_above_the_trained_one_is_noted(model_path):
    r = run_ferry("run", "-p", "Hi", "-n", "2", "-c", "9000", "--no-stats")
    assert r.returncode == 0, r.stderr
    assert "above the model's trained context of 8192" in r.stderr, r.stderr
    r = run_ferry("run", "-p", "Hi", "-n", "2", "-c", "512", "--no-stats")
    assert "trained context" not in r.stderr, r.stderr


def test_a_context_too_large_for_memory_says_what_the_cache_needs(model_path):
    # 16 M tokens of f16 keys and values: 343 GiB, more than any test machine maps.
    r = run_ferry("run", "-p", "Hi", "-n", "2", "-c", "16000000", "--no-stats")
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert "out of memory for the KV cache" in line and "343.3 GiB" in line, r.stderr
    assert "lower --ctx" in line and "--kv-dtype int8" in line
