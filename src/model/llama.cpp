#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>

#include <fmt/format.h>

#include "core/progress.h"
#include "model/gguf_weights.h"
#include "model/moe.h"
#include "quant/dequantize.h"
#include "quant/quantize.h"

namespace ferry::model {
namespace {

// Host memory the model owns for tensors it had to convert at load (norms and biases that were
// not f32, matrices quantized on the way in), kept alive by the tensors that view it.
Tensor owned_tensor(DType type, std::initializer_list<int64_t> shape) {
    const Tensor probe(static_cast<void*>(nullptr), type, shape);
    auto buf = std::make_shared<std::vector<uint8_t>>(probe.bytes());
    return Tensor(buf->data(), type, shape).owned_by(buf);
}

class Binder {
  public:
    Binder(const WeightFile& f, std::optional<DType> quantize_to)
        : f_(f), quantize_to_(quantize_to) {}

    // A matrix of `rows` output channels of `cols` inputs, in the file's type, or quantized to
    // the load's type where one was asked for.
    Status matrix(const std::string& name, int64_t cols, int64_t rows, Tensor& out,
                  bool quantize_it = true) {
        auto t = f_.find(name);
        if (!t) return t.error();
        if (!*t) return make_error("{}: missing tensor '{}'", f_.path(), f_.display_name(name));
        const Tensor& m = **t;
        if (m.ndim() != 2 || m.dim(0) != rows || m.dim(1) != cols)
            return make_error("{}: tensor '{}' has shape {} but [{}, {}] was expected", f_.path(),
                              f_.display_name(name), shape_str(m), rows, cols);
        out = m;
        if (!quantize_it) return Status::Ok();
        if (quantize_to_ && *quantize_to_ != m.dtype()) return quantize(name, out);
        return Status::Ok();
    }

    // A matrix of `cols` inputs whose rows are several matrices one after another (Phi-3's
    // q/k/v and gate/up): each part a view of its rows, quantized on its own where asked.
    Status split_matrix(const std::string& name, int64_t cols,
                        std::initializer_list<std::pair<int64_t, Tensor*>> parts) {
        int64_t rows = 0;
        for (const auto& [n, out] : parts) rows += n;
        Tensor whole;
        if (Status s = matrix(name, cols, rows, whole, false); !s) return s;
        int64_t r0 = 0;
        for (const auto& [n, out] : parts) {
            *out = whole.slice(r0, n);
            r0 += n;
            if (quantize_to_ && *quantize_to_ != out->dtype())
                if (Status s = quantize(name, *out); !s) return s;
        }
        return Status::Ok();
    }

    // Every expert's matrix of `rows` x `cols`: from a stacked {n_expert, rows, cols} tensor
    // (GGUF's *_exps), or from one tensor per expert, `one(e)` (older GGUFs, Hugging Face
    // checkpoints).
    Status experts(const std::string& stacked, const std::function<std::string(int)>& one,
                   int n_expert, int64_t cols, int64_t rows, std::vector<Tensor>& out) {
        out.resize(static_cast<size_t>(n_expert));
        auto t = f_.find(stacked);
        if (!t) return t.error();
        if (*t) {
            const Tensor& m = **t;
            if (m.ndim() != 3 || m.dim(0) != n_expert || m.dim(1) != rows || m.dim(2) != cols)
                return make_error("{}: tensor '{}' has shape {} but [{}, {}, {}] was expected",
                                  f_.path(), f_.display_name(stacked), shape_str(m), n_expert, rows,
                                  cols);
        }
        for (int e = 0; e < n_expert; ++e) {
            Tensor& o = out[static_cast<size_t>(e)];
            std::string name = stacked;
            if (*t) {
                const Tensor& m = **t;
                o = Tensor(static_cast<std::byte*>(m.raw()) + m.stride(0) * e, m.dtype(),
                           {rows, cols});
            } else if (Status s = matrix(name = one(e), cols, rows, o, false); !s) {
                return s;
            }
            if (quantize_to_ && *quantize_to_ != o.dtype())
                if (Status s = quantize(name, o); !s) return s;
        }
        return Status::Ok();
    }

    // A vector of n elements as f32 (converted when the file stores another type); optional
    // ones may be absent.
    // `plus_one`: the file stores w of a norm that scales by 1 + w (transformers' Gemma).
    Status vector(const std::string& name, int64_t n, Tensor& out, bool optional = false,
                  bool plus_one = false) {
        auto t = f_.find(name);
        if (!t) return t.error();
        if (!*t) {
            if (optional) return Status::Ok();
            return make_error("{}: missing tensor '{}'", f_.path(), f_.display_name(name));
        }
        const Tensor& v = **t;
        if (v.ndim() != 1 || v.dim(0) != n)
            return make_error("{}: tensor '{}' has shape {} but [{}] was expected", f_.path(),
                              f_.display_name(name), shape_str(v), n);
        if (v.dtype() == DType::F32 && !plus_one) {
            out = v;
            return Status::Ok();
        }
        out = owned_tensor(DType::F32, {n});
        if (Status s = quant::dequantize_row(v.dtype(), v.raw(), out.data<float>(), n); !s)
            return make_error("{}: tensor '{}': {}", f_.path(), name, s.error().message);
        if (plus_one)
            for (int64_t i = 0; i < n; ++i) out.data<float>()[i] += 1.0f;
        return Status::Ok();
    }

    // What did not get the asked-for type, for a note: "N matrices as q8_0 (rows of 576 ...)".
    std::vector<std::string> notes() const {
        std::vector<std::string> out;
        for (const auto& [what, n] : fallbacks_)
            out.push_back(fmt::format("{} matrices {}", n, what));
        return out;
    }

  private:
    // `m` rounded to the load's type row by row (through f32), as `ferry quantize` would: a
    // matrix whose rows do not split into the type's blocks takes the same fallback type.
    Status quantize(const std::string& name, Tensor& m) {
        const int64_t cols = m.dim(1);
        const DType to = quant::type_for_tensor(*quantize_to_, name, 2, cols);
        // Only the rows' geometry makes a note; w8a8's int8 head is the type's own choice.
        if (quant::fallback_for(*quantize_to_, cols) != *quantize_to_)
            ++fallbacks_[fmt::format("as {} (rows of {} are not whole {}-element blocks)",
                                     dtype_name(to), cols, dtype_info(*quantize_to_).block_size)];
        if (to != m.dtype()) return convert(name, m, to);
        return Status::Ok();
    }
    // m as `to`, row by row, through floats.
    Status convert(const std::string& name, Tensor& m, DType to) {
        const int64_t rows = m.dim(0), cols = m.dim(1);
        Tensor q = owned_tensor(to, {rows, cols});
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            const auto* src = static_cast<const uint8_t*>(m.raw()) + m.stride(0) * r;
            auto* dst = static_cast<uint8_t*>(q.raw()) + q.stride(0) * r;
            if (Status s = quant::dequantize_row(m.dtype(), src, row.data(), cols); !s)
                return make_error("{}: tensor '{}': {}", f_.path(), name, s.error().message);
            if (Status s = quant::quantize_row(to, row.data(), dst, cols); !s)
                return make_error("{}: tensor '{}': {}", f_.path(), name, s.error().message);
        }
        m = q;
        return Status::Ok();
    }
    static std::string shape_str(const Tensor& t) {
        std::string s = "[";
        for (int i = 0; i < t.ndim(); ++i) s += (i ? ", " : "") + std::to_string(t.dim(i));
        return s + "]";
    }

    const WeightFile& f_;
    std::optional<DType> quantize_to_;
    std::map<std::string, int> fallbacks_;
};

// A mixture's MLP (model/moe.h): the router, each expert's gate, up and down (stacked as GGUF
// has them, or one tensor per expert as Hugging Face checkpoints and older GGUFs do), and the
// shared expert with its gate where the config declares one.
Status bind_experts(Binder& b, const WeightFile& f, const LlamaConfig& c, const std::string& p,
                    Tensor& router, std::vector<Tensor>& gate, std::vector<Tensor>& up,
                    std::vector<Tensor>& down, Tensor (&shared)[4]) {
    const int E = c.n_expert;
    const int64_t d = c.n_embd, ff = c.n_ff_expert;
    if (Status s = b.matrix(p + "ffn_gate_inp.weight", d, E, router); !s) return s;
    auto one = [&p](const char* what) {
        return [p, what](int e) { return p + what + "." + std::to_string(e) + ".weight"; };
    };
    for (Status s : {b.experts(p + "ffn_gate_exps.weight", one("ffn_gate"), E, d, ff, gate),
                     b.experts(p + "ffn_up_exps.weight", one("ffn_up"), E, d, ff, up)})
        if (!s) return s;
    if (Status s = b.experts(p + "ffn_down_exps.weight", one("ffn_down"), E, ff, d, down); !s)
        return s;
    if (c.n_ff_shared == 0) return Status::Ok();
    const int64_t fs = c.n_ff_shared;
    for (Status s : {b.matrix(p + "ffn_gate_shexp.weight", d, fs, shared[0]),
                     b.matrix(p + "ffn_up_shexp.weight", d, fs, shared[1]),
                     b.matrix(p + "ffn_down_shexp.weight", fs, d, shared[2])})
        if (!s) return s;
    // The shared expert's gate: one row of n_embd ({n_embd} in GGUF, {1, n_embd} in a
    // directory), multiplied as a matrix.
    const std::string g = p + "ffn_gate_inp_shexp.weight";
    auto t = f.find(g);
    if (!t) return t.error();
    if (*t && (*t)->ndim() == 1 && (*t)->dim(0) == d) {
        shared[3] = Tensor((*t)->raw(), (*t)->dtype(), {1, d});
        return Status::Ok();
    }
    return b.matrix(g, d, 1, shared[3]);
}

}  // namespace

Expected<std::unique_ptr<LlamaModel>> LlamaModel::load(std::shared_ptr<gguf::File> file,
                                                       kernels::Backend& backend, bool progress) {
    auto cfg = read_llama_config(*file);
    if (!cfg) return cfg.error();
    return load(std::make_shared<GgufWeights>(std::move(file)), *cfg, backend, {progress, {}, {}});
}

Expected<std::unique_ptr<LlamaModel>> LlamaModel::load(std::shared_ptr<const WeightFile> file,
                                                       const LlamaConfig& config,
                                                       kernels::Backend& backend,
                                                       const LoadOptions& opt) {
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->file_ = file;
    m->cfg_ = config;
    m->device_ = backend.device();
    const LlamaConfig& c = m->cfg_;
    const bool progress = opt.progress;
    Binder b(*file, opt.weights);
    // A layer count below the file's layers would run the first few and ignore the rest.
    if (const std::string past = file->tensor_past_layer(c.n_layer); !past.empty())
        return make_error("{}: tensor '{}' lies past the {} layers the model declares ({})",
                          file->path(), past, c.n_layer,
                          past.starts_with("blk.") ? c.arch + ".block_count" : "num_hidden_layers");

    // The file's tensors, bound and checked, each matrix with the resident one it becomes.
    struct Bound {
        Tensor attn_norm, bq, bk, bv, q_norm, k_norm, ffn_norm, post_attn_norm, post_ffn_norm;
        Tensor m[7];                     // q, k, v, output, gate, up, down
        Tensor router, sh[4];            // a mixture's router; shared gate, up, down and its gate
        std::vector<Tensor> eg, eu, ed;  // each expert's gate, up, down
    };
    Tensor tok_embd, output, output_norm;
    std::vector<Bound> layers(static_cast<size_t>(c.n_layer));
    m->layers_.resize(layers.size());
    if (auto s = b.matrix("token_embd.weight", c.n_embd, c.n_vocab, tok_embd); !s) return s.error();
    const bool p1 = c.norm_plus_one;
    if (auto s = b.vector("output_norm.weight", c.n_embd, output_norm, false, p1); !s)
        return s.error();
    auto has_output = file->find("output.weight");
    if (!has_output) return has_output.error();
    if (*has_output) {
        if (auto s = b.matrix("output.weight", c.n_embd, c.n_vocab, output); !s) return s.error();
    } else {
        output = tok_embd;  // tied embeddings
        m->tied_output_ = true;
    }
    // Llama 3.1's scaling as a GGUF carries it: per-pair divisors of the frequencies.
    auto freqs = file->find("rope_freqs.weight");
    if (!freqs) return freqs.error();
    std::vector<float> freq_factors;
    if (*freqs) {
        const Tensor& t = **freqs;
        if (t.dtype() != DType::F32 || t.ndim() != 1 || t.numel() != c.rope_dim / 2)
            return make_error("{}: rope_freqs.weight must be {} f32 values (one per rotary pair)",
                              file->path(), c.rope_dim / 2);
        const float* f = t.data<float>();
        for (int64_t i = 0; i < t.numel(); ++i)
            if (!(f[i] > 0))
                return make_error("{}: rope_freqs.weight[{}] is {}, not a positive divisor",
                                  file->path(), i, f[i]);
        freq_factors.assign(f, f + t.numel());
        if (c.rope_scaling.type != RopeScaling::Type::None)
            return make_error("{}: both rope_freqs.weight and a rope scaling of type {}",
                              file->path(), rope_scaling_name(c.rope_scaling.type));
    }
    m->rope_inv_freq_ =
        model::rope_inv_freq(c.rope_dim, c.rope_theta, c.rope_scaling, freq_factors);
    m->rope_scale_ = static_cast<float>(rope_attention_scale(c.rope_scaling));
    if (c.rope_theta_swa > 0 && c.sliding_window > 0)
        m->rope_inv_freq_swa_ = model::rope_inv_freq(c.rope_dim, c.rope_theta_swa, {});
    for (int i = 0; i < c.n_layer; ++i) {
        Bound& l = layers[static_cast<size_t>(i)];
        const std::string p = "blk." + std::to_string(i) + ".";
        // Separate q/k/v and gate/up, or fused where the file has attn_qkv and no ffn_gate.
        auto fused_qkv = file->find(p + "attn_qkv.weight");
        if (!fused_qkv) return fused_qkv.error();
        Status qkv = *fused_qkv
                         ? b.split_matrix(
                               p + "attn_qkv.weight", c.n_embd,
                               {{c.q_dim(), &l.m[0]}, {c.kv_dim(), &l.m[1]}, {c.kv_dim(), &l.m[2]}})
                         : Status::Ok();
        if (!qkv) return qkv.error();
        if (!*fused_qkv)
            for (Status s : {b.matrix(p + "attn_q.weight", c.n_embd, c.q_dim(), l.m[0]),
                             b.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim(), l.m[1]),
                             b.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim(), l.m[2])})
                if (!s) return s.error();
        if (c.is_moe()) {
            if (Status s = bind_experts(b, *file, c, p, l.router, l.eg, l.eu, l.ed, l.sh); !s)
                return s.error();
        } else {
            auto gate = file->find(p + "ffn_gate.weight");
            if (!gate) return gate.error();
            if (!*gate) {
                if (Status s = b.split_matrix(p + "ffn_up.weight", c.n_embd,
                                              {{c.n_ff, &l.m[4]}, {c.n_ff, &l.m[5]}});
                    !s)
                    return s.error();
            } else {
                for (Status s : {b.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff, l.m[4]),
                                 b.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff, l.m[5])})
                    if (!s) return s.error();
            }
            if (Status s = b.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd, l.m[6]); !s)
                return s.error();
        }
        if (c.post_norms)
            for (Status s :
                 {b.vector(p + "post_attention_norm.weight", c.n_embd, l.post_attn_norm, false, p1),
                  b.vector(p + "post_ffw_norm.weight", c.n_embd, l.post_ffn_norm, false, p1)})
                if (!s) return s.error();
        for (Status s : {
                 b.vector(p + "attn_norm.weight", c.n_embd, l.attn_norm, false, p1),
                 b.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd, l.m[3]),
                 b.vector(p + "attn_q.bias", c.q_dim(), l.bq, true),
                 b.vector(p + "attn_k.bias", c.kv_dim(), l.bk, true),
                 b.vector(p + "attn_v.bias", c.kv_dim(), l.bv, true),
                 b.vector(p + "attn_q_norm.weight", c.head_dim, l.q_norm, !c.qk_norms, p1),
                 b.vector(p + "attn_k_norm.weight", c.head_dim, l.k_norm, !c.qk_norms, p1),
                 b.vector(p + "ffn_norm.weight", c.n_embd, l.ffn_norm, false, p1),
             }) {
            if (!s) return s.error();
        }
    }

    m->end_layer_ = c.n_layer;
    const ParallelGroups& pg = opt.parallel;
    if (pg.world && pg.world->size() > 1) m->comm_ = pg.world;
    if (m->comm_ && pg.pp && pg.pp->size() > 1) {
        if (Status s = check_pipeline(c, pg.pp->size()); !s) return s.error();
        const Range stage = split_even(c.n_layer, pg.pp->size(), pg.pp->rank());
        m->first_layer_ = static_cast<int>(stage.begin);
        m->end_layer_ = static_cast<int>(stage.end);
        m->pp_ = pg.pp;
    }
    if (m->comm_ && pg.tp && pg.tp->size() > 1) {
        // This rank's share of every split matrix (model/tensor_split.h); the embedding, the
        // norms and the per-head q/k norms stay whole.
        // The matrices whose columns are cut besides wo: a dense MLP's down, or a mixture's
        // experts' and shared expert's.
        const auto downs = [&](const Bound& l) {
            std::vector<const Tensor*> d;
            if (!c.is_moe()) d.push_back(&l.m[6]);
            for (const Tensor& t : l.ed) d.push_back(&t);
            if (!l.sh[2].empty()) d.push_back(&l.sh[2]);
            return d;
        };
        const auto down_of = [&](const Bound& l) { return downs(l).front()->dtype(); };
        auto split = plan_split(c, layers.empty() ? DType::F32 : layers[0].m[3].dtype(),
                                layers.empty() ? DType::F32 : down_of(layers[0]), pg.tp->rank(),
                                pg.tp->size());
        if (!split) return split.error();
        const TensorSplit& s = *split;
        const int64_t hd = c.head_dim, group = c.n_head / c.n_head_kv;
        const int64_t q0 = s.kv_heads.begin * group * hd, nq = s.kv_heads.size() * group * hd;
        const int64_t k0 = s.kv_heads.begin * hd, nk = s.kv_heads.size() * hd;
        const int64_t nf = s.ffn.size();
        output = output.slice(s.vocab.begin, s.vocab.size());
        for (size_t i = 0; i < layers.size(); ++i) {
            Bound& l = layers[i];
            const auto d = downs(l);
            const bool other_type = std::any_of(d.begin(), d.end(), [&](const Tensor* t) {
                return t->dtype() != down_of(layers[0]);
            });
            if (l.m[3].dtype() != layers[0].m[3].dtype() || other_type)
                return make_error(
                    "--tp: layer {}'s attention output or MLP down is of another type "
                    "than layer 0's; re-quantize the model to one type (--weights)",
                    i);
            l.m[0] = l.m[0].slice(q0, nq);
            l.m[1] = l.m[1].slice(k0, nk);
            l.m[2] = l.m[2].slice(k0, nk);
            auto wo = slice_columns(l.m[3], q0, q0 + nq);
            if (!wo) return wo.error();
            l.m[3] = *wo;
            // Gate and up by rows, down by columns: the dense MLP's, each expert's, and the
            // shared expert's (its own gate stays whole).
            const auto split_mlp = [](Tensor& gate, Tensor& up, Tensor& down, Range r) -> Status {
                gate = gate.slice(r.begin, r.size());
                up = up.slice(r.begin, r.size());
                auto cols = slice_columns(down, r.begin, r.end);
                if (!cols) return cols.error();
                down = *cols;
                return Status::Ok();
            };
            Status st = Status::Ok();
            if (!c.is_moe()) st = split_mlp(l.m[4], l.m[5], l.m[6], s.ffn);
            for (size_t e = 0; st && e < l.eg.size(); ++e)
                st = split_mlp(l.eg[e], l.eu[e], l.ed[e], s.ffn);
            if (st && !l.sh[0].empty()) st = split_mlp(l.sh[0], l.sh[1], l.sh[2], s.shared_ffn);
            if (!st) return st.error();
            if (!l.bq.empty()) l.bq = l.bq.slice(q0, nq);
            if (!l.bk.empty()) l.bk = l.bk.slice(k0, nk);
            if (!l.bv.empty()) l.bv = l.bv.slice(k0, nk);
        }
        m->cfg_.n_head = static_cast<int>(s.kv_heads.size() * group);
        m->cfg_.n_head_kv = static_cast<int>(s.kv_heads.size());
        if (c.is_moe()) {
            m->cfg_.n_ff_expert = static_cast<int>(nf);
            m->cfg_.n_ff_shared = static_cast<int>(s.shared_ffn.size());
        } else {
            m->cfg_.n_ff = static_cast<int>(nf);
        }
        m->tp_ = pg.tp;
        m->split_ = s;
    }

    // Resident on the backend, in its layout: the embedding is looked up a row at a time,
    // every other matrix multiplied.
    // A pipeline stage holds its own layers; the embedding is the first stage's, the output
    // head the last's.
    const bool first_stage = m->first_layer_ == 0, last_stage = m->end_layer_ == c.n_layer;
    const auto held = [&](size_t i) {
        return static_cast<int>(i) >= m->first_layer_ && static_cast<int>(i) < m->end_layer_;
    };
    std::vector<kernels::MatrixSource> sources;
    std::vector<kernels::Matrix*> dests;
    if (first_stage) {
        sources.push_back({tok_embd, kernels::MatrixUse::Rows});
        dests.push_back(&m->tok_embd_);
    }
    if (last_stage) {
        sources.push_back({output, kernels::MatrixUse::Matmul});
        dests.push_back(&m->output_);
    }
    for (size_t i = 0; i < layers.size(); ++i) {
        if (!held(i)) continue;
        Bound& l = layers[i];
        LayerWeights& L = m->layers_[i];
        auto add = [&](const Tensor& t, kernels::Matrix& dst) {
            if (t.empty()) return;
            sources.push_back({t, kernels::MatrixUse::Matmul});
            dests.push_back(&dst);
        };
        kernels::Matrix* dense[] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down};
        for (int j = 0; j < 7; ++j) add(l.m[j], *dense[j]);
        add(l.router, L.router);
        kernels::Matrix* shared[] = {&L.sh_gate, &L.sh_up, &L.sh_down, &L.sh_router};
        for (int j = 0; j < 4; ++j) add(l.sh[j], *shared[j]);
        for (auto [from, to] : {std::pair{&l.eg, &L.exp_gate}, std::pair{&l.eu, &L.exp_up},
                                std::pair{&l.ed, &L.exp_down}}) {
            to->resize(from->size());
            for (size_t e = 0; e < from->size(); ++e) add((*from)[e], (*to)[e]);
        }
    }
    int64_t total = 0;
    for (const auto& src : sources)
        if (src.use == kernels::MatrixUse::Matmul) total += static_cast<int64_t>(src.host.bytes());
    Progress bar("loading weights", total, progress);
    std::vector<kernels::Matrix> res =
        backend.make_resident(sources, [&](int64_t done, int64_t) { bar.update(done); });
    bar.finish();
    for (size_t i = 0; i < res.size(); ++i) *dests[i] = res[i];

    if (last_stage) m->output_norm_ = backend.resident_vector(output_norm);
    for (size_t i = 0; i < layers.size(); ++i) {
        if (!held(i)) continue;
        const Bound& l = layers[i];
        LayerWeights& L = m->layers_[i];
        auto vec = [&](const Tensor& t) {
            return t.empty() ? Tensor() : backend.resident_vector(t);
        };
        L.attn_norm = vec(l.attn_norm);
        L.ffn_norm = vec(l.ffn_norm);
        L.bq = vec(l.bq);
        L.bk = vec(l.bk);
        L.bv = vec(l.bv);
        L.q_norm = vec(l.q_norm);
        L.k_norm = vec(l.k_norm);
        L.post_attn_norm = vec(l.post_attn_norm);
        L.post_ffn_norm = vec(l.post_ffn_norm);
    }
    // The device holds what a multiplication reads; the file's pages of those matrices are
    // read again only by float activations, tools that read the file and (tied) embedding
    // lookups, which touch just their rows. (A matrix quantized at load is not in the file.)
    // Released only after the vectors are copied: a file fault maps the whole page-cache
    // folio around it, so reading a norm afterwards would bring megabytes of them back.
    for (const auto& src : sources)
        if (src.use == kernels::MatrixUse::Matmul && !src.host.owning())
            file->release(src.host.raw(), src.host.bytes());
    if (c.is_moe()) m->expert_tokens_.assign(static_cast<size_t>(c.n_layer) * c.n_expert, 0);
    m->load_notes_ = b.notes();
    return m;
}

size_t LlamaModel::weight_bytes_per_token(const kernels::Backend& backend) const {
    size_t total = backend.bytes_read(output_) + tok_embd_.data.row_bytes();
    auto read = [&](const kernels::Matrix& w) {
        return w.data.empty() ? size_t{0} : backend.bytes_read(w);
    };
    for (const auto& l : layers_) {
        for (const kernels::Matrix* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down,
                                         &l.router, &l.sh_gate, &l.sh_up, &l.sh_down, &l.sh_router})
            total += read(*w);
        // One token reads the experts it is routed to (the same size each).
        if (!l.exp_gate.empty())
            total += static_cast<size_t>(cfg_.n_expert_used) *
                     (read(l.exp_gate[0]) + read(l.exp_up[0]) + read(l.exp_down[0]));
    }
    return total;
}

std::vector<int64_t> LlamaModel::expert_tokens() const {
    return expert_tokens_;
}

void LlamaModel::reset_expert_tokens() const {
    std::fill(expert_tokens_.begin(), expert_tokens_.end(), 0);
}

int64_t LlamaModel::parameter_count() const {
    return file_->parameter_count();
}

int64_t LlamaModel::active_parameter_count() const {
    const LlamaConfig& c = cfg_;
    const int64_t idle = static_cast<int64_t>(c.n_expert - c.n_expert_used) * 3 * c.n_embd *
                         c.n_ff_expert * c.n_layer;
    return parameter_count() - (c.is_moe() ? idle : 0);
}

namespace {

// The forward pass's working tensors, one backend scratch slot each.
enum Slot {
    kX,
    kXn,
    kQ,
    kK,
    kV,
    kAttn,
    kGate,
    kUp,
    kOut,
    kRope,
    kRopeSwa,
    kLast,
    kRouter,
    kExpIn,
    kShGate,
    kMoeSum,
    kLogitsPart
};

void observe(ActivationObserver* o, kernels::Backend& be, int layer, LinearInput which,
             const Tensor& rows) {
    if (o) o->observe(layer, which, be.host_view(rows));
}

}  // namespace

void LlamaModel::forward(kernels::Backend& be, const kernels::Batch& batch,
                         const kernels::KvCacheView& kv, const Tensor& logits,
                         ActivationObserver* observer) const {
    forward_stage(be, batch, kv, logits, observer);
    collect_logits(be, logits);
    end_step();
}

void LlamaModel::collect_logits(kernels::Backend& be, const Tensor& logits,
                                ActivationObserver* observer) const {
    // Rank 0 of a pipeline is its first stage, never its last.
    if (!pp_ || comm_->rank() != 0 || logits.empty()) return;
    const Tensor h = be.host_view(logits);
    pp_->recv({h.data<float>(), static_cast<size_t>(h.numel())}, pp_->size() - 1);
    if (h.raw() != logits.raw()) be.upload(h.raw(), logits);
    std::vector<float> hidden(static_cast<size_t>(logits.rows() * cfg_.n_embd));
    pp_->recv(hidden, pp_->size() - 1);
    if (observer)
        observer->observe_head(Tensor(hidden.data(), DType::F32, {logits.rows(), cfg_.n_embd}));
}

void LlamaModel::end_step() const {
    if (!pp_) return;
    pp_->wait_sends();
    hidden_out_.clear();
}

void LlamaModel::move_keys(kernels::Backend& be, const kernels::KvCacheView& kv, int32_t block,
                           int64_t delta) const {
    const LlamaConfig& c = cfg_;
    // (cos, sin) of delta times each pair's frequency, in double as rope_angles computes them.
    const auto turn = [delta](const std::vector<double>& inv_freq) {
        std::vector<float> cs;
        for (double f : inv_freq) {
            const double theta = static_cast<double>(delta) * f;
            cs.push_back(static_cast<float>(std::cos(theta)));
            cs.push_back(static_cast<float>(std::sin(theta)));
        }
        return cs;
    };
    const std::vector<float> cs = turn(rope_inv_freq_), cs_swa = turn(rope_inv_freq_swa_);
    for (int li = first_layer_; li < end_layer_; ++li) {
        const bool swa = c.window(li) > 0 && !cs_swa.empty();
        be.kv_rotate_keys(kv, li - first_layer_, block, c.rope_dim, swa ? cs_swa : cs,
                          c.rope_style);
    }
}

void LlamaModel::forward_stage(kernels::Backend& be, const kernels::Batch& batch,
                               const kernels::KvCacheView& kv, const Tensor& logits,
                               ActivationObserver* observer) const {
    const LlamaConfig& c = cfg_;
    const int64_t n = batch.n_tokens();
    const int hd = c.head_dim;
    const float attn_scale =
        c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
    const Tensor x = be.scratch(kX, DType::F32, {n, c.n_embd});
    const Tensor xn = be.scratch(kXn, DType::F32, {n, c.n_embd});
    const Tensor q = be.scratch(kQ, DType::F32, {n, c.q_dim()});
    const Tensor k = be.scratch(kK, DType::F32, {n, c.kv_dim()});
    const Tensor v = be.scratch(kV, DType::F32, {n, c.kv_dim()});
    const Tensor attn = be.scratch(kAttn, DType::F32, {n, c.q_dim()});
    const Tensor gate = be.scratch(kGate, DType::F32, {n, c.n_ff});
    const Tensor up = be.scratch(kUp, DType::F32, {n, c.n_ff});
    const Tensor out = be.scratch(kOut, DType::F32, {n, c.n_embd});
    const Tensor rope = be.scratch(kRope, DType::F32, {n, c.rope_dim});

    if (first_layer_ == 0) {
        be.embed(tok_embd_, batch, x);
        if (c.embed_scale != 1.0f) be.scale(x, c.embed_scale);
    } else {  // the previous stage's residual stream
        const Tensor h = be.host_view(x);
        pp_->recv({h.data<float>(), static_cast<size_t>(h.numel())}, pp_->rank() - 1);
        if (h.raw() != x.raw()) be.upload(h.raw(), x);
    }
    // The rotation of every position, the same in every layer of a kind.
    be.rope_angles(batch, rope_inv_freq_, rope_scale_, rope);
    Tensor rope_swa = rope;
    if (!rope_inv_freq_swa_.empty()) {
        rope_swa = be.scratch(kRopeSwa, DType::F32, {n, c.rope_dim});
        be.rope_angles(batch, rope_inv_freq_swa_, 1.0f, rope_swa);
    }

    // A pass that only feeds an observer (no logits wanted, one process) ends at its last layer.
    int end = end_layer_;
    if (observer && observer->last_layer() >= 0 && batch.logit_tokens.empty() && !comm_)
        end = std::min(end, observer->last_layer() + 1);
    for (int li = first_layer_; li < end; ++li) {
        const LayerWeights& L = layers_[li];
        const int kl = li - first_layer_;  // the layer in this rank's KV cache
        const int window = c.window(li);
        const kernels::AttentionShape attn_shape{c.n_head, c.n_head_kv, hd, attn_scale, window};
        const Tensor& layer_rope = window > 0 ? rope_swa : rope;

        // Attention block.
        be.rmsnorm(x, L.attn_norm, c.rms_eps, xn);
        observe(observer, be, li, LinearInput::Attn, xn);
        // q, k and v read the same input: one pass for the three.
        const kernels::MatmulOut qkv[] = {{&L.wq, q}, {&L.wk, k}, {&L.wv, v}};
        be.matmul(qkv, xn);
        if (!L.bq.empty()) be.add_bias(q, L.bq);
        if (!L.bk.empty()) be.add_bias(k, L.bk);
        if (!L.bv.empty()) be.add_bias(v, L.bv);
        if (!L.q_norm.empty()) {  // each head's vector normalised on its own, before rotation
            const Tensor qh = q.reshape({n * c.n_head, hd}), kh = k.reshape({n * c.n_head_kv, hd});
            be.rmsnorm(qh, L.q_norm, c.rms_eps, qh);
            be.rmsnorm(kh, L.k_norm, c.rms_eps, kh);
        }
        be.rope(q, c.n_head, hd, c.rope_dim, layer_rope, c.rope_style);
        be.rope(k, c.n_head_kv, hd, c.rope_dim, layer_rope, c.rope_style);
        be.kv_write(kv, kl, batch, k, v);
        be.attention(kv, kl, batch, attn_shape, q, attn);
        observe(observer, be, li, LinearInput::AttnOut, attn);
        const kernels::MatmulOut o[] = {{&L.wo, out}};
        be.matmul(o, attn);
        reduce(be, out);
        if (!L.post_attn_norm.empty()) be.rmsnorm(out, L.post_attn_norm, c.rms_eps, out);
        be.add(x, out);

        // MLP block.
        be.rmsnorm(x, L.ffn_norm, c.rms_eps, xn);
        observe(observer, be, li, LinearInput::Ffn, xn);
        if (c.is_moe()) {  // each expert's input is its tokens' rows: no FfnDown to observe
            moe_ffn(be, L, li, xn, x);
            continue;
        }
        const kernels::MatmulOut gate_up[] = {{&L.w_gate, gate}, {&L.w_up, up}};
        be.matmul(gate_up, xn);
        if (c.ffn == LlamaConfig::Ffn::GeGLU)
            be.gelu_mul(gate, up);
        else
            be.silu_mul(gate, up);
        observe(observer, be, li, LinearInput::FfnDown, gate);
        const kernels::MatmulOut down[] = {{&L.w_down, out}};
        be.matmul(down, gate);
        reduce(be, out);
        if (!L.post_ffn_norm.empty()) be.rmsnorm(out, L.post_ffn_norm, c.rms_eps, out);
        be.add(x, out);
    }
    if (end != end_layer_) return;

    if (end_layer_ != c.n_layer) {  // the next stage takes it from here
        const Tensor h = be.host_view(x);
        pp_->send({h.data<const float>(), static_cast<size_t>(h.numel())}, pp_->rank() + 1);
        return;
    }
    // Final norm and output head only for the tokens whose logits are wanted.
    const auto rows = static_cast<int64_t>(batch.logit_tokens.size());
    if (rows == 0) return;
    const Tensor last = be.scratch(kLast, DType::F32, {rows, c.n_embd});
    be.gather_rows(x, batch.logit_tokens, last);
    be.rmsnorm(last, output_norm_, c.rms_eps, xn.slice(0, rows));
    if (observer) observer->observe_head(be.host_view(xn.slice(0, rows)));
    if (!tp_) {
        const kernels::MatmulOut head[] = {{&output_, logits}};
        be.matmul(head, xn.slice(0, rows));
        if (c.final_softcap > 0) be.softcap(logits, c.final_softcap);
        send_logits_to_rank0(be, logits, xn.slice(0, rows));
        return;
    }
    // Each rank's vocabulary slice of every row, gathered rank after rank on rank 0 and laid
    // side by side there.
    const int64_t nv = split_.vocab.size();
    const Tensor part = be.scratch(kLogitsPart, DType::F32, {rows, nv});
    const kernels::MatmulOut head[] = {{&output_, part}};
    be.matmul(head, xn.slice(0, rows));
    if (c.final_softcap > 0) be.softcap(part, c.final_softcap);
    const Tensor mine = be.host_view(part);
    const bool root = tp_->rank() == 0;
    if (root) logits_parts_.resize(static_cast<size_t>(rows * c.n_vocab));
    std::vector<int> counts(split_.vocab_rows.size());
    for (size_t r = 0; r < counts.size(); ++r)
        counts[r] = static_cast<int>(rows) * split_.vocab_rows[r];
    tp_->gather({mine.data<const float>(), static_cast<size_t>(rows * nv)}, logits_parts_, counts);
    if (!root) return;
    const Tensor full = be.host_view(logits);
    float* dst = full.data<float>();
    const float* src = logits_parts_.data();
    int64_t col = 0;
    for (const int v : split_.vocab_rows) {
        for (int64_t t = 0; t < rows; ++t)
            std::memcpy(dst + t * c.n_vocab + col, src + t * v,
                        sizeof(float) * static_cast<size_t>(v));
        src += rows * v;
        col += v;
    }
    if (full.raw() != logits.raw()) be.upload(full.raw(), logits);
    send_logits_to_rank0(be, logits, xn.slice(0, rows));
}

void LlamaModel::send_logits_to_rank0(kernels::Backend& be, const Tensor& logits,
                                      const Tensor& hidden) const {
    // A pipeline's last stage (never its first) posts them to stage 0, whose tensor-parallel
    // root is world rank 0, the one that samples; it takes them in collect_logits. The hidden
    // rows go too (an n_embd-wide row beside an n_vocab-wide one), copied, as the scratch they
    // are in serves the next micro-batch before the send completes.
    if (!pp_ || pp_->rank() == 0 || logits.empty()) return;
    const Tensor h = be.host_view(logits);
    pp_->post_send({h.data<const float>(), static_cast<size_t>(h.numel())}, 0);
    const Tensor x = be.host_view(hidden);
    hidden_out_.emplace_back(x.data<const float>(), x.data<const float>() + x.numel());
    pp_->post_send({hidden_out_.back().data(), hidden_out_.back().size()}, 0);
}

comm::CommStats LlamaModel::comm_stats() const {
    comm::CommStats all;
    const comm::Communicator* seen[3] = {};
    int n = 0;
    for (const auto& g : {comm_, tp_, pp_}) {
        if (!g || std::find(seen, seen + n, g.get()) != seen + n) continue;
        seen[n++] = g.get();
        all += g->stats();
    }
    return all;
}

void LlamaModel::reduce(kernels::Backend& be, const Tensor& t) const {
    if (!tp_) return;
    const Tensor h = be.host_view(t);
    tp_->all_reduce_sum({h.data<float>(), static_cast<size_t>(h.numel())});
    if (h.raw() != t.raw()) be.upload(h.raw(), t);
}

void LlamaModel::moe_ffn(kernels::Backend& be, const LayerWeights& L, int layer, const Tensor& xn,
                         const Tensor& x) const {
    const LlamaConfig& c = cfg_;
    const int64_t n = xn.rows();
    const int64_t E = c.n_expert;
    const Tensor logits = be.scratch(kRouter, DType::F32, {n, E});
    const kernels::MatmulOut router[] = {{&L.router, logits}};
    be.matmul(router, xn);
    Routing& routing = routing_;
    route(c, {be.host_view(logits).data<float>(), static_cast<size_t>(n * E)}, n, routing);
    // Split over ranks, each holds a share of every expert's columns: the shares are summed
    // across the ranks before they join the residual stream.
    const bool split = tp_ != nullptr;
    Tensor sum = x;
    if (split) {
        sum = be.scratch(kMoeSum, DType::F32, {n, c.n_embd});
        const Tensor h = be.host_view(sum);
        std::memset(h.raw(), 0, h.bytes());
        if (h.raw() != sum.raw()) be.upload(h.raw(), sum);
    }

    if (!L.sh_gate.data.empty()) {  // the shared expert: every token, scaled by its own gate
        const Tensor gate = be.scratch(kGate, DType::F32, {n, c.n_ff_shared});
        const Tensor up = be.scratch(kUp, DType::F32, {n, c.n_ff_shared});
        const Tensor g = be.scratch(kShGate, DType::F32, {n, 1});
        const Tensor out = be.scratch(kOut, DType::F32, {n, c.n_embd});
        const kernels::MatmulOut gate_up[] = {
            {&L.sh_gate, gate}, {&L.sh_up, up}, {&L.sh_router, g}};
        be.matmul(gate_up, xn);
        const Tensor gh = be.host_view(g);
        shared_gate_.resize(static_cast<size_t>(n));
        shared_rows_.resize(static_cast<size_t>(n));
        for (int64_t t = 0; t < n; ++t) {
            shared_gate_[static_cast<size_t>(t)] = 1.0f / (1.0f + std::exp(-gh.data<float>()[t]));
            shared_rows_[static_cast<size_t>(t)] = static_cast<int32_t>(t);
        }
        be.silu_mul(gate, up);
        const kernels::MatmulOut down[] = {{&L.sh_down, out}};
        be.matmul(down, gate);
        be.add_rows_scaled(sum, shared_rows_, shared_gate_, out);
    }
    // Each expert's tokens gathered and multiplied together, then added back weighted.
    for (int64_t e = 0; e < E; ++e) {
        const auto& tokens = routing.tokens[static_cast<size_t>(e)];
        if (tokens.empty()) continue;
        const auto ne = static_cast<int64_t>(tokens.size());
        const auto ei = static_cast<size_t>(e);
        const Tensor in = be.scratch(kExpIn, DType::F32, {ne, c.n_embd});
        const Tensor gate = be.scratch(kGate, DType::F32, {ne, c.n_ff_expert});
        const Tensor up = be.scratch(kUp, DType::F32, {ne, c.n_ff_expert});
        const Tensor out = be.scratch(kOut, DType::F32, {ne, c.n_embd});
        be.gather_rows(xn, tokens, in);
        const kernels::MatmulOut gate_up[] = {{&L.exp_gate[ei], gate}, {&L.exp_up[ei], up}};
        be.matmul(gate_up, in);
        be.silu_mul(gate, up);
        const kernels::MatmulOut down[] = {{&L.exp_down[ei], out}};
        be.matmul(down, gate);
        be.add_rows_scaled(sum, tokens, routing.weights[ei], out);
        expert_tokens_[static_cast<size_t>(layer) * static_cast<size_t>(E) + ei] += ne;
    }
    if (split) {
        reduce(be, sum);
        be.add(x, sum);
    }
}

Expected<Tensor> LlamaModel::output_head_in_file() const {
    for (const char* name : {"output.weight", "token_embd.weight"}) {  // tied: the second
        auto t = file_->find(name);
        if (!t) return t.error();
        if (*t) return **t;
    }
    return make_error("{}: no output head (output.weight or token_embd.weight)", file_->path());
}

std::vector<std::pair<kernels::Matrix*, kernels::MatrixUse>> LlamaModel::swappable(
    const std::string& name) {
    std::vector<std::pair<kernels::Matrix*, kernels::MatrixUse>> out;
    if (comm_) return out;
    if (name == "token_embd.weight") {
        out.emplace_back(&tok_embd_, kernels::MatrixUse::Rows);
        if (tied_output_) out.emplace_back(&output_, kernels::MatrixUse::Matmul);
    } else if (name == "output.weight" && !tied_output_) {
        out.emplace_back(&output_, kernels::MatrixUse::Matmul);
    } else if (name.starts_with("blk.")) {
        const size_t dot = name.find('.', 4);
        const std::string suffix = dot == std::string::npos ? "" : name.substr(dot + 1);
        int layer = -1;
        try {
            layer = std::stoi(name.substr(4, dot - 4));
        } catch (const std::exception&) {
        }
        if (layer >= 0 && layer < static_cast<int>(layers_.size())) {
            LayerWeights& L = layers_[static_cast<size_t>(layer)];
            const std::pair<const char*, kernels::Matrix*> slots[] = {
                {"attn_q.weight", &L.wq},       {"attn_k.weight", &L.wk},
                {"attn_v.weight", &L.wv},       {"attn_output.weight", &L.wo},
                {"ffn_gate.weight", &L.w_gate}, {"ffn_up.weight", &L.w_up},
                {"ffn_down.weight", &L.w_down}};
            for (const auto& [s, m] : slots)
                if (suffix == s && !m->data.empty())
                    out.emplace_back(m, kernels::MatrixUse::Matmul);
        }
    }
    return out;
}

bool LlamaModel::can_replace(const std::string& name) const {
    return !const_cast<LlamaModel*>(this)->swappable(name).empty();
}

Status LlamaModel::replace_matrix(kernels::Backend& backend, const std::string& name,
                                  const Tensor& host) {
    if (comm_) return make_error("replace_matrix: not under tensor or pipeline parallelism");
    std::vector<kernels::MatrixSource> sources;
    std::vector<kernels::Matrix*> dests;
    for (const auto& [m, use] : swappable(name)) {
        sources.push_back({host, use});
        dests.push_back(m);
    }
    if (dests.empty())
        return make_error("replace_matrix: the model has no dense matrix '{}'", name);
    const kernels::Matrix& old = *dests[0];
    if (host.ndim() != 2 || host.rows() != old.rows() || host.cols() != old.cols())
        return make_error("replace_matrix: '{}' is {}x{}, the replacement {}x{}", name, old.rows(),
                          old.cols(), host.rows(), host.cols());
    const std::vector<kernels::Matrix> res = backend.make_resident(sources);
    for (size_t i = 0; i < res.size(); ++i) *dests[i] = res[i];
    return Status::Ok();
}

}  // namespace ferry::model
