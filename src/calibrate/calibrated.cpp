#include "calibrate/calibrated.h"

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <optional>
#include <type_traits>

#include "calibrate/smoothquant.h"
#include "quant/dequantize.h"
#include "quant/group_grid.h"

namespace ferry::calibrate {
namespace {

using model::LinearInput;

std::string layer_name(int layer, const char* what) {
    return fmt::format("blk.{}.{}.weight", layer, what);
}

struct Consumers {
    LinearInput input;
    std::vector<const char*> tensors;
};
const std::array<Consumers, 4> kConsumers = {{
    {LinearInput::Attn, {"attn_q", "attn_k", "attn_v"}},
    {LinearInput::AttnOut, {"attn_output"}},
    {LinearInput::Ffn, {"ffn_gate", "ffn_up"}},
    {LinearInput::FfnDown, {"ffn_down"}},
}};

template <class Layer>
auto layer_matrices(Layer& l) {
    using M = std::conditional_t<std::is_const_v<Layer>, const FloatMatrix*, FloatMatrix*>;
    return std::array<std::pair<M, const char*>, 7>{{{&l.wq, "attn_q"},
                                                     {&l.wk, "attn_k"},
                                                     {&l.wv, "attn_v"},
                                                     {&l.wo, "attn_output"},
                                                     {&l.w_gate, "ffn_gate"},
                                                     {&l.w_up, "ffn_up"},
                                                     {&l.w_down, "ffn_down"}}};
}

// Every matrix of a rescaled layer changes, so a layer with one left byte for byte as it was
// (--keep) cannot be rescaled: its norms would no longer match.
bool layer_has_kept_tensors(const gguf::File& f, const model::LlamaConfig& c, int li,
                            const TypeForTensor& type_of) {
    for (const Consumers& group : kConsumers)
        for (const char* what : group.tensors) {
            const std::string name = layer_name(li, what);
            const gguf::TensorInfo* t = f.tensor(name);
            if (!t || !type_of(name, t->shape[0])) return true;
        }
    for (const char* norm : {"attn_norm", "ffn_norm"})
        if (!type_of(layer_name(li, norm), c.n_embd)) return true;
    return false;
}

// The calibrated methods work matrix by matrix on the separate q/k/v and gate/up; a fused
// checkpoint (Phi-3's attn_qkv, a double-height ffn_up) is refused before any work.
Status check_separate_matrices(const gguf::File& f) {
    if (f.tensor("blk.0.attn_qkv.weight") || !f.tensor("blk.0.ffn_gate.weight"))
        return make_error(
            "{}: GPTQ, AWQ and SmoothQuant need separate q/k/v and gate/up matrices; this "
            "checkpoint fuses them (as Phi-3 does), which they do not handle yet: round it to "
            "nearest (no --method, no --smooth-alpha)",
            f.path());
    return Status::Ok();
}

// The four inputs in model::LinearInput order, as the notes name them.
const char* const kInputNames[] = {"q/k/v", "attn_output", "gate/up", "ffn_down"};

}  // namespace

Expected<FloatMatrix> read_float_tensor(const gguf::File& f, const std::string& name) {
    const gguf::TensorInfo* t = f.tensor(name);
    if (!t) return make_error("{}: missing tensor '{}'", f.path(), name);
    FloatMatrix m;
    m.cols = t->shape[0];
    m.rows = t->n_elements / m.cols;
    m.w.resize(static_cast<size_t>(t->n_elements));
    const size_t rb = row_bytes(t->type, m.cols);
    for (int64_t r = 0; r < m.rows; ++r)
        if (Status s = quant::dequantize_row(t->type, t->data + rb * r, &m.w[r * m.cols], m.cols);
            !s)
            return make_error("{}: {}", name, s.error().message);
    return m;
}

Expected<TensorOverrides> run_gptq(const gguf::File& f, const model::LlamaConfig& c,
                                   const CalibrationStats& stats, const TypeForTensor& type_of,
                                   const GptqOptions& opt, ThreadPool& pool,
                                   const LayerProgress& progress) {
    if (Status s = check_separate_matrices(f); !s) return s.error();
    TensorOverrides out;
    for (int li = 0; li < c.n_layer; ++li) {
        for (const Consumers& group : kConsumers) {
            const InputStats& st = stats.at(li, group.input);
            std::optional<GptqHessian> hess;  // prepared on first use: kept tensors need none
            for (const char* what : group.tensors) {
                const std::string name = layer_name(li, what);
                const gguf::TensorInfo* t = f.tensor(name);
                if (!t) return make_error("{}: missing tensor '{}'", f.path(), name);
                const auto type = type_of(name, t->shape[0]);
                if (!type || !quant::has_group_grid(*type))
                    continue;  // kept, f16 or a fallback: RTN
                if (!hess) {
                    auto h = prepare_gptq_hessian(st.hessian, st.dim, opt, pool);
                    if (!h) return make_error("{}: {}", name, h.error().message);
                    if (h->damp != opt.damp)
                        out.notes.push_back(
                            fmt::format("layer {}: damping raised to {} to factorize the Hessian",
                                        li, h->damp));
                    hess = std::move(*h);
                }
                auto w = read_float_tensor(f, name);
                if (!w) return w.error();
                auto q = gptq_quantize(*type, w->w.data(), w->rows, w->cols, *hess, pool,
                                       opt.keep_zeros);
                if (!q) return make_error("{}: {}", name, q.error().message);
                out.bytes[name] = std::move(*q);
            }
        }
        if (progress) progress(li + 1, c.n_layer);
    }
    return out;
}

std::vector<std::string> prunable_tensors(int layer) {
    std::vector<std::string> names;
    for (const Consumers& group : kConsumers)
        for (const char* what : group.tensors) names.push_back(layer_name(layer, what));
    return names;
}

Expected<TensorOverrides> run_prune(const gguf::File& f, const model::LlamaConfig& c,
                                    const CalibrationStats* stats, const PruneOptions& opt,
                                    ThreadPool& pool, const LayerProgress& progress,
                                    const LayerStats& stats_for_layer) {
    if (c.is_moe())
        return make_error("{}: pruning a mixture of experts is not supported yet", f.path());
    if (f.tensor("blk.0.attn_qkv.weight") || !f.tensor("blk.0.ffn_gate.weight"))
        return make_error(
            "{}: pruning needs separate q/k/v and gate/up matrices; this checkpoint fuses them "
            "(as Phi-3 does)",
            f.path());
    if (opt.method != PruneMethod::Magnitude && !stats && !stats_for_layer)
        return make_error("{} pruning needs calibration statistics", prune_method_name(opt.method));
    TensorOverrides out;
    CalibrationStats layer_stats;
    for (int li = 0; li < c.n_layer; ++li) {
        if (stats_for_layer && opt.method != PruneMethod::Magnitude) {
            auto s = stats_for_layer(li, out);
            if (!s) return make_error("layer {}: {}", li, s.error().message);
            layer_stats = std::move(*s);
            stats = &layer_stats;
        }
        for (const Consumers& group : kConsumers) {
            std::optional<GptqHessian> hess;
            std::vector<double> norms;
            if (opt.method == PruneMethod::SparseGpt) {
                GptqOptions g;
                g.damp = opt.damp;
                auto h = prepare_gptq_hessian(stats->at(li, group.input).hessian,
                                              stats->at(li, group.input).dim, g, pool);
                if (!h) return make_error("layer {}: {}", li, h.error().message);
                if (h->damp != opt.damp)
                    out.notes.push_back(fmt::format(
                        "layer {}: damping raised to {} to factorize the Hessian", li, h->damp));
                hess = std::move(*h);
            } else if (opt.method == PruneMethod::Wanda) {
                // ||x_j|| up to the token count, which every column shares.
                for (double m : stats->at(li, group.input).sq_mean) norms.push_back(std::sqrt(m));
            }
            for (const char* what : group.tensors) {
                const std::string name = layer_name(li, what);
                auto w = read_float_tensor(f, name);
                if (!w) return w.error();
                const Status s =
                    hess ? sparsegpt_prune(w->w, w->rows, w->cols, opt.pattern, *hess, pool)
                         : prune_by_score(w->w, w->rows, w->cols, opt.pattern, norms, pool);
                if (!s) return make_error("{}: {}", name, s.error().message);
                out.floats[name] = std::move(w->w);
            }
        }
        if (progress) progress(li + 1, c.n_layer);
    }
    return out;
}

Expected<AwqLayer> read_awq_layer(const gguf::File& f, const model::LlamaConfig& c, int layer) {
    AwqLayer l;
    for (auto [m, what] : layer_matrices(l)) {
        auto r = read_float_tensor(f, layer_name(layer, what));
        if (!r) return r.error();
        *m = std::move(*r);
    }
    for (auto [v, what] : {std::pair{&l.attn_norm, "attn_norm"}, {&l.ffn_norm, "ffn_norm"}}) {
        auto r = read_float_tensor(f, layer_name(layer, what));
        if (!r) return r.error();
        *v = std::move(r->w);
    }
    if (f.tensor(fmt::format("blk.{}.attn_v.bias", layer))) {
        auto r = read_float_tensor(f, fmt::format("blk.{}.attn_v.bias", layer));
        if (!r) return r.error();
        l.bv = std::move(r->w);
    }
    if (l.wq.rows != c.q_dim() || l.wv.rows != c.kv_dim() || l.w_down.cols != c.n_ff)
        return make_error("{}: layer {} does not have the configuration's shapes", f.path(), layer);
    return l;
}

void store_awq_layer(const AwqLayer& l, int layer, TensorOverrides& out) {
    for (auto [m, what] : layer_matrices(l)) out.floats[layer_name(layer, what)] = m->w;
    out.floats[layer_name(layer, "attn_norm")] = l.attn_norm;
    out.floats[layer_name(layer, "ffn_norm")] = l.ffn_norm;
    if (!l.bv.empty()) out.floats[fmt::format("blk.{}.attn_v.bias", layer)] = l.bv;
}

Expected<TensorOverrides> run_awq(const gguf::File& f, const model::LlamaConfig& c,
                                  const CalibrationStats& stats, const TypeForTensor& type_of,
                                  ThreadPool& pool, const LayerProgress& progress) {
    if (Status s = check_separate_matrices(f); !s) return s.error();
    TensorOverrides out;
    std::array<double, 4> alpha_sum{}, err_rtn{}, err_awq{};
    int n_done = 0;
    for (int li = 0; li < c.n_layer; ++li) {
        if (layer_has_kept_tensors(f, c, li, type_of)) {
            out.notes.push_back(
                fmt::format("layer {}: some of its tensors are kept (--keep); no AWQ scaling", li));
            if (progress) progress(li + 1, c.n_layer);
            continue;
        }
        auto l = read_awq_layer(f, c, li);
        if (!l) return l.error();
        // The error search rounds each matrix as it will be written.
        for (auto [m, what] : layer_matrices(*l))
            m->target = *type_of(layer_name(li, what), m->cols);
        const auto res = awq_layer(*l, stats.layers[static_cast<size_t>(li)], c.n_head, c.n_head_kv,
                                   c.head_dim, pool);
        for (size_t k = 0; k < res.size(); ++k) {
            alpha_sum[k] += res[k].alpha;
            err_rtn[k] += res[k].err_rtn;
            err_awq[k] += res[k].err;
        }
        ++n_done;
        store_awq_layer(*l, li, out);
        if (progress) progress(li + 1, c.n_layer);
    }
    for (size_t k = 0; k < 4 && n_done > 0; ++k)
        out.notes.push_back(fmt::format(
            "awq {}: mean alpha {:.2f}, calibration output error {:.1f} % of RTN's", kInputNames[k],
            alpha_sum[k] / n_done, err_rtn[k] > 0 ? 100.0 * err_awq[k] / err_rtn[k] : 100.0));
    return out;
}

Expected<TensorOverrides> run_smoothquant(const gguf::File& f, const model::LlamaConfig& c,
                                          const CalibrationStats& stats,
                                          const TypeForTensor& type_of, double alpha,
                                          const LayerProgress& progress) {
    if (Status s = check_separate_matrices(f); !s) return s.error();
    TensorOverrides out;
    std::array<double, 4> before{}, after{};
    int n_done = 0;
    for (int li = 0; li < c.n_layer; ++li) {
        if (layer_has_kept_tensors(f, c, li, type_of)) {
            out.notes.push_back(
                fmt::format("layer {}: some of its tensors are kept (--keep); no smoothing", li));
        } else {
            auto l = read_awq_layer(f, c, li);
            if (!l) return l.error();
            const SmoothResult r = smoothquant_layer(*l, stats.layers[static_cast<size_t>(li)],
                                                     alpha, c.n_head, c.n_head_kv, c.head_dim);
            for (size_t k = 0; k < 4; ++k) {
                before[k] += r.spread_before[k];
                after[k] += r.spread_after[k];
            }
            ++n_done;
            store_awq_layer(*l, li, out);
        }
        if (progress) progress(li + 1, c.n_layer);
    }
    for (size_t k = 0; k < 4 && n_done > 0; ++k)
        out.notes.push_back(fmt::format(
            "smoothquant {} input (alpha {}): largest channel max / median {:.1f}x -> {:.1f}x "
            "(mean over layers)",
            kInputNames[k], alpha, before[k] / n_done, after[k] / n_done));
    return out;
}

}  // namespace ferry::calibrate
