#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "core/progress.h"
#include "kernels/packed_weights.h"
#include "kernels/paged_attention.h"

namespace ferry::model {
namespace {

using kernels::Weight;

class Binder {
  public:
    explicit Binder(const gguf::File& f) : f_(f) {}

    // A matrix of `rows` output channels of `cols` inputs (GGUF shape [cols, rows]).
    Status matrix(const std::string& name, int64_t cols, int64_t rows, Weight& out) {
        const gguf::TensorInfo* t = f_.tensor(name);
        if (!t) return make_error("{}: missing tensor '{}'", f_.path(), name);
        if (t->shape.size() != 2 || t->shape[0] != cols || t->shape[1] != rows)
            return make_error("{}: tensor '{}' has shape {} but [{}, {}] was expected", f_.path(),
                              name, shape_str(*t), cols, rows);
        const auto& info = dtype_info(t->type);
        if (!info.supported)
            return make_error("{}: tensor '{}' has type {}, which ferry cannot compute with",
                              f_.path(), name, info.name);
        out = Weight{t->type, t->data, rows, cols, row_bytes(info, cols)};
        return Status::Ok();
    }

    // An F32 vector of n elements; optional ones may be absent.
    Status vector(const std::string& name, int64_t n, const float*& out, bool optional = false) {
        const gguf::TensorInfo* t = f_.tensor(name);
        if (!t) {
            if (optional) return Status::Ok();
            return make_error("{}: missing tensor '{}'", f_.path(), name);
        }
        if (t->type != DType::F32 || t->n_elements != n)
            return make_error("{}: tensor '{}' must be f32 with {} elements", f_.path(), name, n);
        out = reinterpret_cast<const float*>(t->data);
        return Status::Ok();
    }

  private:
    static std::string shape_str(const gguf::TensorInfo& t) {
        std::string s = "[";
        for (size_t i = 0; i < t.shape.size(); ++i)
            s += (i ? ", " : "") + std::to_string(t.shape[i]);
        return s + "]";
    }
    const gguf::File& f_;
};

}  // namespace

Expected<std::unique_ptr<LlamaModel>> LlamaModel::load(std::shared_ptr<gguf::File> file,
                                                       bool progress) {
    auto cfg = read_llama_config(*file);
    if (!cfg) return cfg.error();
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->file_ = file;
    m->cfg_ = *cfg;
    const LlamaConfig& c = m->cfg_;
    Binder b(*file);

    if (auto s = b.matrix("token_embd.weight", c.n_embd, c.n_vocab, m->tok_embd_); !s)
        return s.error();
    if (auto s = b.vector("output_norm.weight", c.n_embd, m->output_norm_); !s) return s.error();
    if (file->tensor("output.weight")) {
        if (auto s = b.matrix("output.weight", c.n_embd, c.n_vocab, m->output_); !s)
            return s.error();
    } else {
        m->output_ = m->tok_embd_;  // tied embeddings
    }
    m->layers_.resize(c.n_layer);
    for (int i = 0; i < c.n_layer; ++i) {
        LayerWeights& l = m->layers_[i];
        const std::string p = "blk." + std::to_string(i) + ".";
        for (Status s : {
                 b.vector(p + "attn_norm.weight", c.n_embd, l.attn_norm),
                 b.matrix(p + "attn_q.weight", c.n_embd, c.q_dim(), l.wq),
                 b.matrix(p + "attn_k.weight", c.n_embd, c.kv_dim(), l.wk),
                 b.matrix(p + "attn_v.weight", c.n_embd, c.kv_dim(), l.wv),
                 b.matrix(p + "attn_output.weight", c.q_dim(), c.n_embd, l.wo),
                 b.vector(p + "attn_q.bias", c.q_dim(), l.bq, true),
                 b.vector(p + "attn_k.bias", c.kv_dim(), l.bk, true),
                 b.vector(p + "attn_v.bias", c.kv_dim(), l.bv, true),
                 b.vector(p + "ffn_norm.weight", c.n_embd, l.ffn_norm),
                 b.matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff, l.w_gate),
                 b.matrix(p + "ffn_up.weight", c.n_embd, c.n_ff, l.w_up),
                 b.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd, l.w_down),
             }) {
            if (!s) return s.error();
        }
    }
    m->make_resident(progress);
    return m;
}

void LlamaModel::make_resident(bool progress) {
    std::vector<Weight*> all = {&output_};
    for (LayerWeights& l : layers_)
        for (Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            all.push_back(w);
    auto bytes = [](const Weight& w) { return w.row_stride * static_cast<size_t>(w.rows); };
    int64_t total = 0;
    for (const Weight* w : all) total += static_cast<int64_t>(bytes(*w));
    // Every matrix a token reads lives in one anonymous buffer backed by huge pages (each alone
    // is < 2 MiB, and file pages are 4 KiB ones): packed for the integer kernels, or copied
    // as it is for the float ones. Either way its file pages are then released.
    auto slot = [&](const Weight& w) {
        return ((kernels::packable(w) ? kernels::packed_bytes(w) : bytes(w)) + 63) / 64 * 64;
    };
    size_t resident_total = 0;
    for (const Weight* w : all) resident_total += slot(*w);
    resident_ = HugeBuffer(resident_total);
    size_t at = 0;
    Progress bar("loading weights", total, progress);
    int64_t done = 0;
    for (Weight* w : all) {
        auto* dst = reinterpret_cast<uint8_t*>(resident_.data()) + at;
        at += slot(*w);
        if (kernels::packable(*w)) {
            kernels::pack_weight(*w, dst);
            w->packed = dst;
            // The packed copy serves every integer product; the original pages are read again
            // only by float activations, tools that read the file and (tied) embedding lookups,
            // which touch just their rows.
            file_->release(w->data, bytes(*w));
        } else {
            std::memcpy(dst, w->data, bytes(*w));
            file_->release(w->data, bytes(*w));
            w->data = dst;
        }
        done += static_cast<int64_t>(bytes(*w));
        bar.update(done);
    }
    bar.finish();
}

size_t LlamaModel::weight_bytes_per_token() const {
    // What the kernels stream: the packed copy where integer activations read one (a Q4_K
    // tile is 2.8 % larger than the file's blocks, an int4_g128 one 18 %), the matrix else.
    const bool integer = kernels::activations() != kernels::Activations::F32;
    auto bytes = [integer](const Weight& w) {
        return integer && w.packed ? kernels::packed_bytes(w)
                                   : w.row_stride * static_cast<size_t>(w.rows);
    };
    size_t total = bytes(output_) + tok_embd_.row_stride;
    for (const auto& l : layers_)
        total += bytes(l.wq) + bytes(l.wk) + bytes(l.wv) + bytes(l.wo) + bytes(l.w_gate) +
                 bytes(l.w_up) + bytes(l.w_down);
    return total;
}

int64_t LlamaModel::parameter_count() const {
    int64_t n = 0;
    for (const auto& t : file_->tensors()) n += t.n_elements;
    return n;
}

void LlamaModel::forward(std::span<const int32_t> tokens, std::span<const BatchSeq> seqs,
                         kv::KvStore& store, float* logits, ThreadPool& pool) const {
    const LlamaConfig& c = cfg_;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int hd = c.head_dim;
    const int bs = store.block_size();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

    // Which sequence and position every token of the batch belongs to.
    std::vector<int32_t> tok_seq(n);
    std::vector<int64_t> tok_pos(n);
    for (int64_t s = 0, t = 0; s < static_cast<int64_t>(seqs.size()); ++s)
        for (int i = 0; i < seqs[s].n_tokens; ++i, ++t) {
            tok_seq[t] = static_cast<int32_t>(s);
            tok_pos[t] = seqs[s].start_pos + i;
        }

    // Working memory, kept per thread between calls: a step of 64 sequences needs ~2 MB, and
    // allocations that size came back as fresh pages to fault in and zero on every step (5 % of
    // a batched decode). Every buffer is written before it is read. They keep the largest size
    // any call on the thread needed (every model's, a draft's too: forward is never re-entered
    // on a thread), which the engine's token budget bounds (~13 MB at 512 tokens here).
    thread_local std::vector<float> bufs[10];
    auto buffer = [](std::vector<float>& b, int64_t size) -> std::vector<float>& {
        if (static_cast<int64_t>(b.size()) < size) b.resize(size);
        return b;
    };
    auto& x = buffer(bufs[0], n * c.n_embd);
    auto& xn = buffer(bufs[1], n * c.n_embd);
    auto& q = buffer(bufs[2], n * c.q_dim());
    auto& k = buffer(bufs[3], n * c.kv_dim());
    auto& v = buffer(bufs[4], n * c.kv_dim());
    auto& attn = buffer(bufs[5], n * c.q_dim());
    auto& gate = buffer(bufs[6], n * c.n_ff);
    auto& up = buffer(bufs[7], n * c.n_ff);
    auto& ffn_out = buffer(bufs[8], n * c.n_embd);
    auto& rope_cs = buffer(bufs[9], n * c.rope_dim);
    // Per sequence, the addresses of its blocks in the current layer.
    std::vector<std::vector<const void*>> k_blocks(seqs.size()), v_blocks(seqs.size());
    std::vector<kernels::SeqBlocks> seq_blocks(seqs.size());

    for (int64_t t = 0; t < n; ++t) kernels::get_row(tok_embd_, tokens[t], &x[t * c.n_embd]);
    // A token's rotation is the same in every layer.
    for (int64_t t = 0; t < n; ++t)
        kernels::rope_angles(tok_pos[t], c.rope_dim, c.rope_theta, &rope_cs[t * c.rope_dim]);
    // Per-token work of a batch (norms, rotations, cache writes) over the pool once there is
    // enough of it: with 64 sequences decoding, the serial share held the other core idle.
    auto per_token = [&](auto&& fn) {
        if (n < 8) {
            for (int64_t t = 0; t < n; ++t) fn(t);
            return;
        }
        pool.parallel_for(n, [&](int64_t t0, int64_t t1) {
            for (int64_t t = t0; t < t1; ++t) fn(t);
        });
    };

    auto add_bias = [n](float* y, const float* bias, int dim) {
        if (!bias) return;
        for (int64_t t = 0; t < n; ++t)
            for (int i = 0; i < dim; ++i) y[t * dim + i] += bias[i];
    };

    for (int li = 0; li < c.n_layer; ++li) {
        const LayerWeights& L = layers_[li];

        // Attention block.
        per_token([&](int64_t t) {
            kernels::rmsnorm(&x[t * c.n_embd], L.attn_norm, &xn[t * c.n_embd], c.n_embd, c.rms_eps);
        });
        if (observer_) observer_->observe(li, LinearInput::Attn, xn.data(), n, c.n_embd);
        // q, k and v read the same input: one parallel region for the three.
        const kernels::MatmulOut qkv[] = {{L.wq, q.data()}, {L.wk, k.data()}, {L.wv, v.data()}};
        kernels::matmul_many(qkv, xn.data(), n, pool);
        add_bias(q.data(), L.bq, c.q_dim());
        add_bias(k.data(), L.bk, c.kv_dim());
        add_bias(v.data(), L.bv, c.kv_dim());
        per_token([&](int64_t t) {
            const int64_t pos = tok_pos[t];
            const float* cs = &rope_cs[t * c.rope_dim];
            kernels::rope(&q[t * c.q_dim()], c.n_head, hd, c.rope_dim, cs, c.rope_style);
            kernels::rope(&k[t * c.kv_dim()], c.n_head_kv, hd, c.rope_dim, cs, c.rope_style);
            const int32_t block = seqs[tok_seq[t]].kv.blocks[pos / bs];
            store.write(li, block, static_cast<int>(pos % bs), &k[t * c.kv_dim()],
                        &v[t * c.kv_dim()]);
        });
        for (size_t s = 0; s < seqs.size(); ++s) {
            const auto& kv = seqs[s].kv;
            k_blocks[s].resize(kv.n_blocks);
            v_blocks[s].resize(kv.n_blocks);
            for (int64_t b = 0; b < kv.n_blocks; ++b) {
                k_blocks[s][b] = store.k(li, kv.blocks[b]);
                v_blocks[s][b] = store.v(li, kv.blocks[b]);
            }
            seq_blocks[s] = {k_blocks[s].data(), v_blocks[s].data()};
        }
        // Token t sees positions [0, pos]: causal masking is just the length of the scan.
        kernels::attend_batch({q.data(), attn.data(), n, c.n_head, c.n_head_kv, hd, scale,
                               tok_seq.data(), tok_pos.data(), seq_blocks, bs, store.layout(),
                               store.dtype(), store.k_channel_scales(li)},
                              pool);
        if (observer_) observer_->observe(li, LinearInput::AttnOut, attn.data(), n, c.q_dim());
        kernels::matmul(L.wo, attn.data(), n, ffn_out.data(), pool);
        for (int64_t i = 0; i < n * c.n_embd; ++i) x[i] += ffn_out[i];

        // MLP block.
        per_token([&](int64_t t) {
            kernels::rmsnorm(&x[t * c.n_embd], L.ffn_norm, &xn[t * c.n_embd], c.n_embd, c.rms_eps);
        });
        if (observer_) observer_->observe(li, LinearInput::Ffn, xn.data(), n, c.n_embd);
        const kernels::MatmulOut gate_up[] = {{L.w_gate, gate.data()}, {L.w_up, up.data()}};
        kernels::matmul_many(gate_up, xn.data(), n, pool);
        // Row by row, so whether an element lands in the vector body or the scalar tail (two
        // exp roundings) never depends on the batch.
        per_token(
            [&](int64_t t) { kernels::silu_mul(&gate[t * c.n_ff], &up[t * c.n_ff], c.n_ff); });
        if (observer_) observer_->observe(li, LinearInput::FfnDown, gate.data(), n, c.n_ff);
        kernels::matmul(L.w_down, gate.data(), n, ffn_out.data(), pool);
        for (int64_t i = 0; i < n * c.n_embd; ++i) x[i] += ffn_out[i];
    }

    // Final norm and output head only for the tokens whose logits are wanted.
    int64_t rows = 0;
    for (int64_t s = 0, t0 = 0; s < static_cast<int64_t>(seqs.size()); t0 += seqs[s].n_tokens, ++s)
        for (int64_t t = t0 + seqs[s].n_tokens - seqs[s].n_logits; t < t0 + seqs[s].n_tokens; ++t)
            kernels::rmsnorm(&x[t * c.n_embd], output_norm_, &xn[rows++ * c.n_embd], c.n_embd,
                             c.rms_eps);
    if (rows > 0) kernels::matmul(output_, xn.data(), rows, logits, pool);
}

}  // namespace ferry::model
