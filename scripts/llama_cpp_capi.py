"""llama.cpp through its C API (ctypes on libllama.so; no llama-cpp-python needed), the few calls
the golden-file scripts make: load a GGUF, tokenize, detokenize, the last position's logits."""
import ctypes
import os

import numpy as np


class LlamaCpp:
    """One GGUF loaded by llama.cpp."""

    def __init__(self, lib, model):
        L = ctypes.CDLL(lib)
        self.L = L
        L.llama_backend_init.restype = None
        L.llama_backend_init()
        L.llama_log_set.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self._quiet = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)(
            lambda *a: None)
        L.llama_log_set(ctypes.cast(self._quiet, ctypes.c_void_p), None)

        # llama_model_params goes in and out by value and its fields change between versions;
        # as an opaque blob bigger than any version's struct it crosses the ABI the same way
        # (x86-64 and AArch64 pass such structs through memory), with the defaults untouched.
        class Params(ctypes.Structure):
            _fields_ = [("blob", ctypes.c_uint8 * 1024)]

        class Batch(ctypes.Structure):  # llama_batch, a stable layout
            _fields_ = [("n_tokens", ctypes.c_int32), ("token", ctypes.c_void_p),
                        ("embd", ctypes.c_void_p), ("pos", ctypes.c_void_p),
                        ("n_seq_id", ctypes.c_void_p), ("seq_id", ctypes.c_void_p),
                        ("logits", ctypes.c_void_p)]

        L.llama_model_default_params.restype = Params
        L.llama_context_default_params.restype = Params
        L.llama_init_from_model.argtypes = [ctypes.c_void_p, Params]
        L.llama_init_from_model.restype = ctypes.c_void_p
        L.llama_vocab_n_tokens.argtypes = [ctypes.c_void_p]
        L.llama_batch_get_one.argtypes = [ctypes.POINTER(ctypes.c_int32), ctypes.c_int32]
        L.llama_batch_get_one.restype = Batch
        L.llama_decode.argtypes = [ctypes.c_void_p, Batch]
        L.llama_get_logits_ith.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        L.llama_get_logits_ith.restype = ctypes.POINTER(ctypes.c_float)
        L.llama_free.argtypes = [ctypes.c_void_p]
        L.llama_model_load_from_file.argtypes = [ctypes.c_char_p, Params]
        L.llama_model_load_from_file.restype = ctypes.c_void_p
        L.llama_model_get_vocab.argtypes = [ctypes.c_void_p]
        L.llama_model_get_vocab.restype = ctypes.c_void_p
        L.llama_model_free.argtypes = [ctypes.c_void_p]
        L.llama_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                     ctypes.POINTER(ctypes.c_int32), ctypes.c_int32,
                                     ctypes.c_bool, ctypes.c_bool]
        L.llama_tokenize.restype = ctypes.c_int32
        L.llama_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32),
                                       ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32,
                                       ctypes.c_bool, ctypes.c_bool]
        L.llama_detokenize.restype = ctypes.c_int32
        self.model = L.llama_model_load_from_file(model.encode(), L.llama_model_default_params())
        if not self.model:
            raise SystemExit(f"llama.cpp could not load {model}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.path = model

    def tokenize(self, data, add_special, parse_special):
        n = len(data) + 16
        buf = (ctypes.c_int32 * n)()
        r = self.L.llama_tokenize(self.vocab, data, len(data), buf, n, add_special, parse_special)
        assert r >= 0, r
        return list(buf[:r])

    def detokenize(self, ids, unparse_special):
        arr = (ctypes.c_int32 * max(1, len(ids)))(*ids)
        n = 64 + 64 * len(ids)
        out = ctypes.create_string_buffer(n)
        r = self.L.llama_detokenize(self.vocab, arr, len(ids), out, n, False, unparse_special)
        assert r >= 0, r
        return out.raw[:r]

    def last_logits(self, ids):
        """The last position's logits after `ids`, in a fresh context (default parameters: f16
        KV cache, the library's thread count)."""
        params = self.L.llama_context_default_params()
        if len(ids) > 512:  # the default context; n_ctx is the struct's first field in every version
            n_ctx = (len(ids) + 255) // 256 * 256
            ctypes.memmove(params.blob, ctypes.byref(ctypes.c_uint32(n_ctx)), 4)
        ctx = self.L.llama_init_from_model(self.model, params)
        arr = (ctypes.c_int32 * len(ids))(*ids)
        if self.L.llama_decode(ctx, self.L.llama_batch_get_one(arr, len(ids))) != 0:
            raise SystemExit(f"{self.path}: llama_decode failed")
        p = self.L.llama_get_logits_ith(ctx, -1)
        out = np.ctypeslib.as_array(p, shape=(self.n_vocab,)).astype(np.float64)
        self.L.llama_free(ctx)
        return out

    def close(self):
        self.L.llama_model_free(self.model)


def find_libllama(arg):
    if arg:
        return arg
    if os.environ.get("LLAMA_CPP_LIB"):
        return os.environ["LLAMA_CPP_LIB"]
    try:
        import llama_cpp  # llama-cpp-python ships the library it was built with
        for name in ("libllama.so", "libllama.dylib"):
            p = os.path.join(os.path.dirname(llama_cpp.__file__), "lib", name)
            if os.path.exists(p):
                return p
    except ImportError:
        pass
    raise SystemExit("give --libllama (libllama.so of a llama.cpp build, "
                     "or llama-cpp-python's bundled one) or set LLAMA_CPP_LIB")