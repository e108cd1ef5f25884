// `ferry synth OUT.gguf --like PRESET|config.json|model.gguf [--type T] [--layers N] [--seed S]`:
// a model with a real architecture's shapes and random weights, to benchmark a model nobody has
// downloaded (and to give the GPU check and the family benchmarks files of the sizes users run).
//
// Weights: every matrix and bias 0.02 x a unit-variance variate (Hugging Face's initializer
// range), drawn as the normalised sum of four uniforms (Irwin-Hall: mean 0, standard deviation
// 1, bounded at +-3.46), which is fast enough for 8 B weights and has no outliers far out in
// the tails; norm weights 1. A row's values depend only on the seed, the tensor and the row,
// so a file is the same whatever the thread count. The tokenizer is the default model's, so
// every command runs on the file: its vocabulary padded with unused tokens up to the shape's
// vocabulary, or cut to its first tokens (keeping the merges among them) when the shape's is
// smaller.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/weight_types.h"
#include "core/paths.h"
#include "core/progress.h"
#include "core/thread_pool.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "kernels/backend.h"
#include "model/llama_config.h"
#include "plan/model_spec.h"
#include "quant/ferry_types.h"
#include "quant/quantize.h"

namespace ferry::cli {
namespace {

struct SynthOptions {
    std::string out, like, type = "q4_0";
    std::string tokenizer_from = "default";
    int group_size = 128;
    int layers = 0;  // 0: the shape's
    uint64_t seed = 0;
    int threads = 0;
    bool quiet = false;
};

uint64_t splitmix64(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Zeroes the 2 smallest magnitudes of every 4 (magnitude pruning, 2:4), for --type int4s.
void prune_quartets(float* x, int64_t n) {
    for (int64_t q = 0; q + 4 <= n; q += 4) {
        int idx[4] = {0, 1, 2, 3};
        std::sort(idx, idx + 4,
                  [&](int a, int b) { return std::fabs(x[q + a]) < std::fabs(x[q + b]); });
        x[q + idx[0]] = x[q + idx[1]] = 0.0f;
    }
}

// Row `row` of tensor `tensor`: n values of 0.02 x the Irwin-Hall(4) variate, normalised.
void random_row(uint64_t seed, uint64_t tensor, int64_t row, float* out, int64_t n) {
    uint64_t s = seed * 0x2545f4914f6cdd1dull ^ (tensor << 40) ^ static_cast<uint64_t>(row);
    splitmix64(s);
    constexpr float kScale = 0.02f * 1.7320508f / 65536.0f;  // sqrt(3): unit variance
    for (int64_t i = 0; i < n; ++i) {
        const uint64_t r = splitmix64(s);
        const float sum = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) +
                                             ((r >> 32) & 0xffff) + (r >> 48));
        out[i] = (sum - 2.0f * 65535.0f) * kScale;
    }
}

// The default model's tokenizer metadata, fitted to `vocab` tokens.
void copy_tokenizer(const gguf::File& src, int64_t vocab, gguf::Writer& w, bool quiet) {
    const gguf::Array* tokens = src.get_array("tokenizer.ggml.tokens");
    if (!tokens) throw ExitError(src.path() + ": no tokenizer.ggml.tokens to copy");
    const auto n_src = static_cast<int64_t>(tokens->items.size());
    for (const auto& [key, value] : src.metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        w.set(key, value);
    }
    auto resized = [&](const char* key, auto&& pad) {
        const gguf::Array* a = src.get_array(key);
        if (!a) return;
        gguf::Array out = *a;
        if (vocab < n_src) {
            out.items.resize(static_cast<size_t>(vocab));
        } else {
            for (int64_t i = n_src; i < vocab; ++i) out.items.push_back(pad(i));
        }
        w.set(key, gguf::make_array(out.elem_type, std::move(out.items)));
    };
    resized("tokenizer.ggml.tokens", [](int64_t i) {
        return gguf::make_string("<|synth_unused_" + std::to_string(i) + "|>");
    });
    resized("tokenizer.ggml.token_type", [](int64_t) { return gguf::make_i32(5); });  // unused
    resized("tokenizer.ggml.scores", [](int64_t) { return gguf::make_f32(0.0f); });
    if (vocab < n_src) {
        // A smaller BPE vocabulary: the merges whose parts and result it still holds.
        std::set<std::string> kept;
        for (int64_t i = 0; i < vocab; ++i)
            kept.insert(std::get<std::string>(tokens->items[static_cast<size_t>(i)].v));
        if (const gguf::Array* merges = src.get_array("tokenizer.ggml.merges")) {
            gguf::Array out = *merges;
            out.items.clear();
            for (const auto& m : merges->items) {
                const auto& s = std::get<std::string>(m.v);
                const size_t sp = s.find(' ');
                if (sp == std::string::npos) continue;
                const std::string a = s.substr(0, sp), b = s.substr(sp + 1);
                if (kept.count(a) && kept.count(b) && kept.count(a + b)) out.items.push_back(m);
            }
            w.set("tokenizer.ggml.merges", gguf::make_array(out.elem_type, std::move(out.items)));
        }
        for (const char* id :
             {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
              "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id"})
            if (auto v = src.get_int(id); v && *v >= vocab)
                throw ExitError(
                    fmt::format("a vocabulary of {} tokens cannot keep {} ({})", vocab, id, *v));
    }
    if (!quiet && vocab != n_src)
        std::fprintf(stderr, "ferry synth: the default model's %lld-token vocabulary %s to %lld\n",
                     static_cast<long long>(n_src), vocab > n_src ? "padded" : "cut",
                     static_cast<long long>(vocab));
}

void synth(const SynthOptions& o) {
    // Checked before the work, not after it: the write would rename over a device or fail.
    if (Status st = gguf::check_output_path(o.out); !st) throw ExitError(st.error().message);
    plan::ModelSpec m = take(plan::load_model_spec(o.like));
    // Gemma 3's local/global period, from the whole model's layers (the last of each global).
    const int64_t swa_period =
        m.n_sliding_layers > 0 ? m.n_layers / std::max<int64_t>(1, m.n_layers - m.n_sliding_layers)
                               : 0;
    if (o.layers > 0) m.n_layers = o.layers;
    // config.json's model types as GGUF names them (Mixtral is a llama file with experts).
    const auto type = model::arch_of_model_type(m.arch);
    const std::string arch = type ? type->gguf_arch : std::string();
    if (arch != "llama" && arch != "qwen2" && arch != "qwen3" && arch != "gemma3" &&
        arch != "qwen3moe" && arch != "qwen2moe")
        throw ExitError(fmt::format(
            "--like {}: architecture '{}' is not one ferry synthesizes (llama, mistral, mixtral, "
            "qwen2, qwen3, gemma3, qwen2_moe, qwen3_moe)",
            o.like, m.arch));
    if (m.n_shared_experts > 1)
        throw ExitError(fmt::format("--like {}: more than one shared expert", o.like));
    const bool gemma = arch == "gemma3", qk_norms = type->qk_norms;
    const WeightTarget wt = take(parse_weight_target(o.type, o.group_size));
    const DType target = wt.base;
    const auto tok_file = take(gguf::File::open(take(resolve_model_path(o.tokenizer_from))));

    gguf::Writer w;
    auto u32 = [&](const std::string& key, int64_t v) {
        w.set(arch + "." + key, gguf::make_u32(static_cast<uint32_t>(v)));
    };
    w.set("general.architecture", gguf::make_string(arch));
    w.set("general.type", gguf::make_string("model"));
    w.set("general.name", gguf::make_string("synthetic " + m.name));
    u32("block_count", m.n_layers);
    u32("context_length", m.max_ctx);
    u32("embedding_length", m.hidden);
    u32("feed_forward_length", m.ffn);
    u32("attention.head_count", m.n_heads);
    u32("attention.head_count_kv", m.n_kv_heads);
    u32("attention.key_length", m.head_dim);
    u32("attention.value_length", m.head_dim);
    u32("rope.dimension_count", m.head_dim);
    u32("vocab_size", m.vocab);
    w.set(arch + ".rope.freq_base", gguf::make_f32(static_cast<float>(m.rope_theta)));
    w.set(arch + ".attention.layer_norm_rms_epsilon",
          gguf::make_f32(static_cast<float>(m.rms_eps)));
    if (m.is_moe()) {
        u32("expert_count", m.n_experts);
        u32("expert_used_count", m.n_experts_used);
        if (arch != "llama") u32("expert_feed_forward_length", m.expert_ffn);
        if (m.n_shared_experts > 0) u32("expert_shared_feed_forward_length", m.shared_expert_ffn);
    }
    if (gemma && m.sliding_window > 0 && swa_period > 0) {
        u32("attention.sliding_window", m.sliding_window);
        u32("attention.sliding_window_pattern", swa_period);
    }
    set_weight_type_metadata(w, wt);
    w.set("ferry.synth.like", gguf::make_string(m.name));
    w.set("ferry.synth.seed", gguf::make_u64(o.seed));
    w.set("ferry.synth.init", gguf::make_string("0.02 x normalised Irwin-Hall(4); norms 1"));
    if (quant::is_int4s(target)) {  // the layers' matrices keep the 2 largest of every 4
        w.set("ferry.sparsity.pattern", gguf::make_string("2:4"));
        w.set("ferry.sparsity.method", gguf::make_string("magnitude"));
    }
    copy_tokenizer(*tok_file, m.vocab, w, o.quiet);

    // The tensors as llama.cpp names them; shape in GGUF order: {columns, rows[, experts]}.
    struct Spec {
        std::string name;
        int64_t cols, rows;   // rows = 1: a vector
        bool ones = false;    // a norm's weights
        int64_t experts = 0;  // > 0: that many stacked matrices (a mixture's experts)
        int64_t all_rows() const { return rows * std::max<int64_t>(experts, 1); }
    };
    std::vector<Spec> specs = {{"token_embd.weight", m.hidden, m.vocab}};
    const int64_t q_dim = m.n_heads * m.head_dim, kv_dim = m.n_kv_heads * m.head_dim;
    for (int64_t l = 0; l < m.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        specs.push_back({p + "attn_norm.weight", m.hidden, 1, true});
        specs.push_back({p + "attn_q.weight", m.hidden, q_dim});
        specs.push_back({p + "attn_k.weight", m.hidden, kv_dim});
        specs.push_back({p + "attn_v.weight", m.hidden, kv_dim});
        if (m.qkv_bias) {
            specs.push_back({p + "attn_q.bias", q_dim, 1});
            specs.push_back({p + "attn_k.bias", kv_dim, 1});
            specs.push_back({p + "attn_v.bias", kv_dim, 1});
        }
        if (qk_norms) {
            specs.push_back({p + "attn_q_norm.weight", m.head_dim, 1, true});
            specs.push_back({p + "attn_k_norm.weight", m.head_dim, 1, true});
        }
        specs.push_back({p + "attn_output.weight", q_dim, m.hidden});
        if (gemma) {
            specs.push_back({p + "post_attention_norm.weight", m.hidden, 1, true});
            specs.push_back({p + "post_ffw_norm.weight", m.hidden, 1, true});
        }
        specs.push_back({p + "ffn_norm.weight", m.hidden, 1, true});
        if (m.is_moe()) {
            const int64_t E = m.n_experts, f = m.expert_ffn;
            specs.push_back({p + "ffn_gate_inp.weight", m.hidden, E});
            specs.push_back({p + "ffn_gate_exps.weight", m.hidden, f, false, E});
            specs.push_back({p + "ffn_up_exps.weight", m.hidden, f, false, E});
            specs.push_back({p + "ffn_down_exps.weight", f, m.hidden, false, E});
            if (m.n_shared_experts > 0) {
                const int64_t fs = m.shared_expert_ffn;
                specs.push_back({p + "ffn_gate_inp_shexp.weight", m.hidden, 1});
                specs.push_back({p + "ffn_gate_shexp.weight", m.hidden, fs});
                specs.push_back({p + "ffn_up_shexp.weight", m.hidden, fs});
                specs.push_back({p + "ffn_down_shexp.weight", fs, m.hidden});
            }
            continue;
        }
        specs.push_back({p + "ffn_gate.weight", m.hidden, m.ffn});
        specs.push_back({p + "ffn_up.weight", m.hidden, m.ffn});
        specs.push_back({p + "ffn_down.weight", m.ffn, m.hidden});
    }
    specs.push_back({"output_norm.weight", m.hidden, 1, true});
    if (!m.tied_embeddings) specs.push_back({"output.weight", m.hidden, m.vocab});

    int64_t total = 0;
    std::vector<quant::KMixTensor> shapes;
    for (const Spec& s : specs) {
        total += s.cols * s.all_rows();
        shapes.push_back({s.name, s.experts ? std::vector<int64_t>{s.cols, s.rows, s.experts}
                                            : std::vector<int64_t>{s.cols, s.rows}});
    }
    const quant::KMixModel k_model = quant::k_mix_model(shapes);
    // One pool for the rows of every tensor.
    const auto backend =
        take(kernels::make_backend({.threads = resolve_threads(o.threads), .activations = {}}));
    ThreadPool& pool = backend->host_pool();
    auto bar = std::make_shared<Progress>("synth " + m.name, total, !o.quiet);
    auto done = std::make_shared<int64_t>(0);
    std::map<DType, int64_t> by_type;
    for (size_t ti = 0; ti < specs.size(); ++ti) {
        const Spec s = specs[ti];
        const size_t n_dims = s.experts ? 3 : s.rows == 1 ? 1 : 2;
        const DType type = wt.mix ? quant::k_mix_type(*wt.mix, k_model, s.name, n_dims, s.cols)
                                  : quant::type_for_tensor(target, s.name, n_dims, s.cols);
        by_type[type] += s.cols * s.all_rows();
        std::vector<int64_t> shape = {s.cols};
        if (n_dims >= 2) shape.push_back(s.rows);
        if (n_dims == 3) shape.push_back(s.experts);
        auto produce = [s, ti, type, &pool, &o, bar, done](std::vector<uint8_t>& out) -> Status {
            const size_t rb = row_bytes(type, s.cols);
            const int64_t rows = s.all_rows();
            out.resize(rb * static_cast<size_t>(rows));
            std::vector<std::string> errors(static_cast<size_t>(pool.size()));
            pool.run([&](int share, int n_shares) {
                std::vector<float> row(static_cast<size_t>(s.cols));
                for (int64_t r = rows * share / n_shares; r < rows * (share + 1) / n_shares; ++r) {
                    if (s.ones)
                        std::fill(row.begin(), row.end(), 1.0f);
                    else
                        random_row(o.seed, ti, r, row.data(), s.cols);
                    if (quant::is_int4s(type)) prune_quartets(row.data(), s.cols);
                    if (Status st =
                            quant::quantize_row(type, row.data(), out.data() + rb * r, s.cols);
                        !st) {
                        errors[static_cast<size_t>(share)] = st.error().message;
                        return;
                    }
                }
            });
            for (const auto& e : errors)
                if (!e.empty()) return make_error("{}", e);
            *done += s.cols * rows;
            bar->update(*done);
            return Status::Ok();
        };
        if (Status st = w.add_tensor(s.name, shape, type, produce); !st)
            throw ExitError(st.error().message);
    }
    if (Status st = w.write(o.out); !st) throw ExitError(st.error().message);
    bar->finish();
    if (!o.quiet) {
        std::string types;
        for (const auto& [t, n] : by_type)
            types += fmt::format("{}{} {:.1f} %", types.empty() ? "" : ", ", dtype_name(t),
                                 100.0 * static_cast<double>(n) / static_cast<double>(total));
        std::fprintf(stderr,
                     "ferry synth: wrote %s: like %s (%lld layers, hidden %lld, ffn %lld, %lld / "
                     "%lld heads of %lld, vocab %lld%s), %.2f B weights (%s), seed %llu\n",
                     o.out.c_str(), m.name.c_str(), static_cast<long long>(m.n_layers),
                     static_cast<long long>(m.hidden), static_cast<long long>(m.ffn),
                     static_cast<long long>(m.n_heads), static_cast<long long>(m.n_kv_heads),
                     static_cast<long long>(m.head_dim), static_cast<long long>(m.vocab),
                     m.tied_embeddings ? ", tied" : "", static_cast<double>(total) / 1e9,
                     types.c_str(), static_cast<unsigned long long>(o.seed));
    }
}

}  // namespace

void add_synth_command(CLI::App& app) {
    auto o = std::make_shared<SynthOptions>();
    auto* cmd = app.add_subcommand(
        "synth", "write a model with a real architecture's shapes and random weights");
    cmd->add_option("out", o->out, "output GGUF file")->required();
    std::string presets;
    for (const auto& p : plan::preset_names()) presets += (presets.empty() ? "" : ", ") + p;
    cmd->add_option("--like", o->like,
                    "the shapes: a preset (" + presets +
                        "), a Hugging Face config.json (or its directory) or a GGUF file")
        ->required();
    cmd->add_option("--type", o->type,
                    "weight type of the matrices (q4_0, q4_1, q5_0, q5_1, q8_0, q4_k, q5_k, q6_k, "
                    "f16, bf16, f32; llama.cpp's mixes q4_k_m, q5_k_m; int8, int4, int3, fp8, "
                    "w8a8; int4s: the layers' matrices pruned 2:4 by magnitude, then int4s)")
        ->capture_default_str();
    cmd->add_option("--group-size", o->group_size, "int4 / int3 / int4s group size (32, 64 or 128)")
        ->capture_default_str();
    cmd->add_option("--layers", o->layers, "number of layers (default: the shape's)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--seed", o->seed, "random seed; the same seed writes the same file")
        ->capture_default_str();
    cmd->add_option("--tokenizer-from", o->tokenizer_from,
                    "a GGUF file whose tokenizer the model gets, fitted to its vocabulary (where "
                    "the default model is not, e.g. a GPU machine)")
        ->capture_default_str();
    cmd->add_option("-t,--threads", o->threads, "worker threads (default: physical cores)")
        ->check(CLI::Range(0, 1024));
    cmd->add_flag("-q,--quiet", o->quiet, "no progress or summary on stderr");
    cmd->callback([o] { synth(*o); });
}

}  // namespace ferry::cli
