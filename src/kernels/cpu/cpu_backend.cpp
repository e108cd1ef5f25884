#include "kernels/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/huge_buffer.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/machine_probe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/packed_weights.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/reference.h"
#include "kernels/sample_row.h"

namespace ferry::kernels::cpu {
namespace {

Weight weight_of(const Matrix& m) {
    Weight w{m.type(), static_cast<const uint8_t*>(m.data.raw()), m.rows(), m.cols(),
             m.data.ndim() > 1 ? m.data.stride(0) : m.data.row_bytes()};
    w.packed = static_cast<const uint8_t*>(m.layout.raw());
    return w;
}

size_t matrix_bytes(const Matrix& m) {
    return m.data.row_bytes() * static_cast<size_t>(m.rows());
}

// Host memory that is resident as soon as it is had: a reservation that only becomes
// resident when traffic comes would make memory use look smaller than it is (and `ferry
// plan` disagree with it), and would move page faults onto the first requests.
std::shared_ptr<HugeBuffer> resident_buffer(size_t n) {
    auto b = std::make_shared<HugeBuffer>(n);
    if (n) std::memset(b->data(), 0, n);
    return b;
}

// One token's keys or values of one KV head into the cache's element type: f16 rows through
// the level's conversion, the others through the scalar row quantizers.
int64_t store_row(quant::KvDType t, const float* x, int n, std::byte* dst, float* scale,
                  const float* channel_scale) {
    if (t == quant::KvDType::F16) {
        f32_to_f16_row(x, n, reinterpret_cast<uint16_t*>(dst));
        return 0;
    }
    return quant::quantize_kv_row(t, x, n, dst, scale, channel_scale);
}

}  // namespace

CpuBackend::CpuBackend(int threads, Activations act)
    : pool_(threads > 0 ? threads : physical_core_count()), act_(act) {}

std::vector<std::pair<std::string, std::string>> CpuBackend::describe() const {
    return {{"backend", "cpu"},
            {"cpu_level", cpu_level_name(cpu_level())},
            {"activations", activations_name(act_)},
            {"threads", std::to_string(pool_.size())}};
}

Tensor CpuBackend::alloc(DType type, std::span<const int64_t> shape) {
    Tensor t(static_cast<void*>(nullptr), type, shape);
    auto buf = resident_buffer(t.bytes());
    return Tensor(buf->data(), type, shape).owned_by(buf);
}

void CpuBackend::upload(const void* host, const Tensor& dst) {
    std::memcpy(dst.raw(), host, dst.bytes());
}

void CpuBackend::download(const Tensor& src, void* host) {
    std::memcpy(host, src.raw(), src.bytes());
}

void CpuBackend::copy(std::span<const Copy> copies) {
    for (const Copy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
}

Tensor CpuBackend::scratch(int slot, DType type, std::initializer_list<int64_t> shape) {
    // Kept between calls: a step of 64 sequences needs ~2 MB, and allocations that size came
    // back as fresh pages to fault in and zero on every step (5 % of a batched decode). Each
    // keeps the largest size asked of it, which the engine's token budget bounds.
    if (slot >= static_cast<int>(scratch_.size())) scratch_.resize(static_cast<size_t>(slot) + 1);
    Tensor t(static_cast<void*>(nullptr), type, shape);
    auto& buf = scratch_[static_cast<size_t>(slot)];
    const size_t floats = (t.bytes() + sizeof(float) - 1) / sizeof(float);
    if (buf.size() < floats) buf.resize(floats);
    return Tensor(buf.data(), type, shape);
}

std::vector<Matrix> CpuBackend::make_resident(
    std::span<const MatrixSource> sources, const std::function<void(int64_t, int64_t)>& progress) {
    // Every matrix a token multiplies lives in one anonymous buffer backed by huge pages (each
    // alone is < 2 MiB, and file pages are 4 KiB ones): packed for the integer kernels, or
    // copied as it is for the float ones. Matrices read a row at a time stay where they are.
    std::vector<Matrix> out(sources.size());
    auto slot = [](const Weight& w) {
        return ((packable(w) ? packed_bytes(w) : w.row_stride * static_cast<size_t>(w.rows)) + 63) /
               64 * 64;
    };
    size_t total = 0;
    int64_t total_bytes = 0;
    for (size_t i = 0; i < sources.size(); ++i) {
        out[i].data = sources[i].host;
        if (sources[i].use != MatrixUse::Matmul) continue;
        total += slot(weight_of(out[i]));
        total_bytes += static_cast<int64_t>(matrix_bytes(out[i]));
    }
    auto buf = std::make_shared<HugeBuffer>(total);
    size_t at = 0;
    int64_t done = 0;
    for (Matrix& m : out) {
        const MatrixSource& src = sources[static_cast<size_t>(&m - out.data())];
        if (src.use != MatrixUse::Matmul) continue;
        const Weight w = weight_of(m);
        auto* dst = buf->data() + at;
        at += slot(w);
        if (packable(w)) {
            // The packed copy serves every integer product; the rows are read again only by
            // float activations and the reference (the file's pages, faulted in on demand).
            pack_weight(w, reinterpret_cast<uint8_t*>(dst));
            m.layout =
                Tensor(dst, DType::I8, {static_cast<int64_t>(packed_bytes(w))}).owned_by(buf);
        } else {
            std::memcpy(dst, m.data.raw(), matrix_bytes(m));
            m.data = Tensor(dst, m.type(), {m.rows(), m.cols()}).owned_by(buf);
        }
        done += static_cast<int64_t>(matrix_bytes(m));
        if (progress) progress(done, total_bytes);
    }
    return out;
}

Tensor CpuBackend::resident_vector(const Tensor& host) {
    // A vector read in place from the file would fault in, with its page, the neighbouring
    // pages of matrices make_resident already released (the kernel maps a whole folio, up to
    // megabytes, around a file fault): ~60 MB for a 135M model's norms. So it gets a copy.
    if (host.empty() || host.owning() || !host.contiguous()) return host;
    auto buf = std::make_shared<std::vector<std::byte>>(host.bytes());
    std::memcpy(buf->data(), host.raw(), host.bytes());
    return Tensor(buf->data(), host.dtype(), host.shape()).owned_by(buf);
}

size_t CpuBackend::bytes_read(const Matrix& w) const {
    // The packed copy where integer activations read one (a Q4_K tile is 2.8 % larger than the
    // file's blocks, an int4_g128 one 18 %), the rows else.
    if (act_ != Activations::F32 && !w.layout.empty()) return w.layout.bytes();
    return matrix_bytes(w);
}

template <class Fn>
void CpuBackend::per_row(int64_t n, Fn&& fn) {
    if (n < 8) {
        for (int64_t t = 0; t < n; ++t) fn(t);
        return;
    }
    pool_.parallel_for(n, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) fn(t);
    });
}

void CpuBackend::embed(const Matrix& table, const Batch& b, const Tensor& out) {
    const Weight w = weight_of(table);
    float* y = out.data<float>();
    for (int64_t t = 0; t < b.n_tokens(); ++t) get_row(w, b.tokens[t], y + t * w.cols);
}

void CpuBackend::rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) {
    const int64_t dim = x.cols();
    const float* xp = x.data<float>();
    const float* wp = weight.data<float>();
    float* yp = out.data<float>();
    per_row(x.rows(), [&](int64_t t) { cpu::rmsnorm(xp + t * dim, wp, yp + t * dim, dim, eps); });
}

void CpuBackend::matmul(std::span<const kernels::MatmulOut> outs, const Tensor& x) {
    cpu::MatmulTarget ws[8];
    std::vector<cpu::MatmulTarget> many;
    cpu::MatmulTarget* dst = ws;
    if (outs.size() > std::size(ws)) {
        many.resize(outs.size());
        dst = many.data();
    }
    for (size_t i = 0; i < outs.size(); ++i)
        dst[i] = {weight_of(*outs[i].w), outs[i].y.data<float>()};
    matmul_many({dst, outs.size()}, x.data<float>(), x.rows(), pool_, act_);
}

void CpuBackend::add(const Tensor& x, const Tensor& y) {
    float* a = x.data<float>();
    const float* b = y.data<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) a[i] += b[i];
}

void CpuBackend::add_bias(const Tensor& y, const Tensor& bias) {
    float* a = y.data<float>();
    const float* b = bias.data<float>();
    const int64_t dim = y.cols();
    for (int64_t t = 0, n = y.rows(); t < n; ++t)
        for (int64_t i = 0; i < dim; ++i) a[t * dim + i] += b[i];
}

void CpuBackend::silu_mul(const Tensor& gate, const Tensor& up) {
    // Row by row, so whether an element lands in the vector body or the scalar tail (two exp
    // roundings) never depends on the batch.
    const int64_t dim = gate.cols();
    float* g = gate.data<float>();
    const float* u = up.data<float>();
    per_row(gate.rows(), [&](int64_t t) { cpu::silu_mul(g + t * dim, u + t * dim, dim); });
}

void CpuBackend::gelu_mul(const Tensor& gate, const Tensor& up) {
    const int64_t dim = gate.cols();
    float* g = gate.data<float>();
    const float* u = up.data<float>();
    per_row(gate.rows(), [&](int64_t t) { cpu::gelu_mul(g + t * dim, u + t * dim, dim); });
}

void CpuBackend::scale(const Tensor& x, float s) {
    float* a = x.data<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) a[i] *= s;
}

void CpuBackend::softcap(const Tensor& x, float cap) {
    float* a = x.data<float>();
    const int64_t dim = x.cols();
    per_row(x.rows(), [&](int64_t t) { cpu::ref::softcap(a + t * dim, dim, cap); });
}

void CpuBackend::rope_angles(const Batch& b, std::span<const double> inv_freq, float scale,
                             const Tensor& cos_sin) {
    float* cs = cos_sin.data<float>();
    const int64_t rope_dim = 2 * static_cast<int64_t>(inv_freq.size());
    for (int64_t t = 0; t < b.n_tokens(); ++t)
        cpu::rope_angles(b.rope_position(t), inv_freq, scale, cs + t * rope_dim);
}

void CpuBackend::kv_rotate_keys(const KvCacheView& kv, int layer, int32_t block, int rope_dim,
                                std::span<const float> cos_sin, RopeStyle style) {
    if (kv.dtype == quant::KvDType::Int8)
        throw std::invalid_argument("kv_rotate_keys: int8 keys have fixed per-channel scales");
    if (static_cast<int>(cos_sin.size()) != rope_dim)
        throw std::invalid_argument("kv_rotate_keys: cos_sin must hold rope_dim / 2 pairs");
    const size_t eb = quant::kv_elem_bytes(kv.dtype);
    const int hd = kv.head_dim, n_heads = kv.kv_dim / kv.head_dim;
    std::byte* base = kv.k_block(layer, block);
    auto* scales = reinterpret_cast<float*>(base + kv.layout.scale_offset);
    const bool token_scales = quant::kv_token_scales(kv.dtype, true);
    std::vector<float> row(static_cast<size_t>(hd));
    for (int slot = 0; slot < kv.block_size; ++slot)
        for (int h = 0; h < n_heads; ++h) {
            std::byte* at = base + (h * kv.layout.head_stride + slot * kv.layout.pos_stride) * eb;
            float* s = token_scales ? scales + static_cast<size_t>(slot) * n_heads + h : nullptr;
            quant::dequantize_kv_row(kv.dtype, at, hd, s ? *s : 1.0f, nullptr, row.data());
            cpu::rope(row.data(), 1, hd, rope_dim, cos_sin.data(), style);
            float scale = 0;
            store_row(kv.dtype, row.data(), hd, at, &scale, nullptr);
            if (s) *s = scale;
        }
}

void CpuBackend::rope(const Tensor& x, int n_heads, int head_dim, int rope_dim,
                      const Tensor& cos_sin, RopeStyle style) {
    const int64_t dim = x.cols();
    float* xp = x.data<float>();
    const float* cs = cos_sin.data<float>();
    per_row(x.rows(), [&](int64_t t) {
        cpu::rope(xp + t * dim, n_heads, head_dim, rope_dim, cs + t * rope_dim, style);
    });
}

void CpuBackend::kv_write(const KvCacheView& kv, int layer, const Batch& b, const Tensor& k,
                          const Tensor& v) {
    const quant::KvDType t = kv.dtype;
    const size_t eb = quant::kv_elem_bytes(t);
    const int hd = kv.head_dim, n_heads = kv.kv_dim / kv.head_dim;
    const float* cs = kv.k_channel_scales
                          ? kv.k_channel_scales + static_cast<size_t>(layer) * kv.kv_dim
                          : nullptr;
    const float* kp = k.data<float>();
    const float* vp = v.data<float>();
    // Writes to different slots may run concurrently.
    per_row(b.n_tokens(), [&](int64_t tok) {
        const int64_t pos = b.positions[tok];
        const int32_t block = kv.table(b.seqs[b.token_seq[tok]], layer)[pos / kv.block_size];
        const int slot = static_cast<int>(pos % kv.block_size);
        for (int key = 0; key < 2; ++key) {
            std::byte* base = key ? kv.k_block(layer, block) : kv.v_block(layer, block);
            const float* x = (key ? kp : vp) + tok * kv.kv_dim;
            auto* scales = reinterpret_cast<float*>(base + kv.layout.scale_offset) +
                           static_cast<size_t>(slot) * n_heads;
            for (int h = 0; h < n_heads; ++h) {
                const size_t at = h * kv.layout.head_stride + slot * kv.layout.pos_stride;
                float s = 0;
                const int64_t clipped =
                    store_row(t, x + static_cast<size_t>(h) * hd, hd, base + at * eb, &s,
                              key && cs ? cs + static_cast<size_t>(h) * hd : nullptr);
                if (clipped && kv.k_clipped)
                    kv.k_clipped->fetch_add(clipped, std::memory_order_relaxed);
                if (quant::kv_token_scales(t, key)) scales[h] = s;
            }
        }
    });
}

void CpuBackend::kv_move_slots(const KvCacheView& kv, const BatchSeq& s,
                               std::span<const std::pair<int64_t, int64_t>> moves) {
    const size_t eb = quant::kv_elem_bytes(kv.dtype);
    const int n_heads = kv.kv_dim / kv.head_dim;
    const size_t row_bytes = static_cast<size_t>(kv.head_dim) * eb;
    for (int layer = 0; layer < kv.n_layer; ++layer) {
        const std::span<const int32_t> table = kv.table(s, layer);
        for (const auto& [from, to] : moves) {
            const int32_t bf = table[static_cast<size_t>(from / kv.block_size)];
            const int32_t bt = table[static_cast<size_t>(to / kv.block_size)];
            const auto sf = static_cast<size_t>(from % kv.block_size);
            const auto st = static_cast<size_t>(to % kv.block_size);
            for (int key = 0; key < 2; ++key) {
                const std::byte* src = key ? kv.k_block(layer, bf) : kv.v_block(layer, bf);
                std::byte* dst = key ? kv.k_block(layer, bt) : kv.v_block(layer, bt);
                for (int h = 0; h < n_heads; ++h) {
                    const size_t hs = static_cast<size_t>(h) * kv.layout.head_stride;
                    std::memcpy(dst + (hs + st * kv.layout.pos_stride) * eb,
                                src + (hs + sf * kv.layout.pos_stride) * eb, row_bytes);
                }
                // Per-token scales travel with their rows (copied whether the type has them:
                // the bytes are the block's either way).
                if (quant::kv_token_scales(kv.dtype, key != 0)) {
                    const auto* fs = reinterpret_cast<const float*>(src + kv.layout.scale_offset);
                    auto* ts = reinterpret_cast<float*>(dst + kv.layout.scale_offset);
                    std::memcpy(ts + st * n_heads, fs + sf * n_heads, n_heads * sizeof(float));
                }
            }
        }
    }
}

void CpuBackend::attention(const KvCacheView& kv, int layer, const Batch& b,
                           const AttentionShape& shape, const Tensor& q, const Tensor& out) {
    size_t total = 0;
    for (const BatchSeq& s : b.seqs) total += kv.table(s, layer).size();
    block_k_.resize(total);
    block_v_.resize(total);
    std::vector<SeqBlocks> seqs(b.seqs.size());
    for (size_t s = 0, at = 0; s < b.seqs.size(); ++s) {
        const std::span<const int32_t> table = kv.table(b.seqs[s], layer);
        const BatchSeq& bs = b.seqs[s];
        seqs[s] = {block_k_.data() + at, block_v_.data() + at, bs.attn_mass,
                   static_cast<int64_t>(table.size())};
        if (!bs.tree.empty()) {
            seqs[s].tree = bs.tree.data();
            seqs[s].first_token = bs.first_token;
            seqs[s].tree_start = bs.start_pos;
        }
        for (int32_t blk : table) {
            block_k_[at] = kv.k_block(layer, blk);
            block_v_[at] = kv.v_block(layer, blk);
            ++at;
        }
    }
    // A tree token's window ends at its position, which is below its slot.
    std::vector<int64_t> window_pos;
    if (shape.window > 0 && std::any_of(b.seqs.begin(), b.seqs.end(),
                                        [](const BatchSeq& s) { return !s.tree.empty(); })) {
        window_pos.resize(static_cast<size_t>(b.n_tokens()));
        for (int64_t t = 0; t < b.n_tokens(); ++t) {
            const BatchSeq& bs = b.seqs[static_cast<size_t>(b.token_seq[t])];
            const int64_t pos = b.rope_position(t) - bs.rope_offset;
            // Its window would leave out ancestors the slot order still shows it.
            if (!bs.tree.empty() && pos + 1 - shape.window > bs.start_pos)
                throw std::invalid_argument(
                    "attention: a draft tree deeper than the sliding window");
            window_pos[static_cast<size_t>(t)] = pos;
        }
    }
    // Token t sees positions [0, pos] (or its window's): causal masking is the scan's length.
    AttentionBatch ab{q.data<float>(),
                      out.data<float>(),
                      b.n_tokens(),
                      shape.n_head,
                      shape.n_head_kv,
                      shape.head_dim,
                      shape.scale,
                      b.token_seq.data(),
                      b.positions.data(),
                      seqs,
                      kv.block_size,
                      kv.layout,
                      kv.dtype,
                      kv.k_channel_scales
                          ? kv.k_channel_scales + static_cast<size_t>(layer) * kv.kv_dim
                          : nullptr,
                      shape.window};
    ab.window_pos = window_pos.empty() ? nullptr : window_pos.data();
    attend_batch(ab, pool_);
}

void CpuBackend::gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) {
    const size_t rb = x.row_bytes();
    const auto* src = static_cast<const std::byte*>(x.raw());
    auto* dst = static_cast<std::byte*>(out.raw());
    for (size_t i = 0; i < rows.size(); ++i)
        std::memcpy(dst + i * rb, src + static_cast<size_t>(rows[i]) * rb, rb);
}

void CpuBackend::add_rows_scaled(const Tensor& x, std::span<const int32_t> rows,
                                 std::span<const float> weights, const Tensor& y) {
    // A row of n_embd floats per routed token: memory-light next to the experts' products, so
    // a plain loop (which the compiler vectorises) is both the reference and the fast path.
    const int64_t dim = x.cols();
    for (size_t i = 0; i < rows.size(); ++i) {
        float* dst = x.data<float>() + static_cast<int64_t>(rows[i]) * dim;
        const float* src = y.data<float>() + static_cast<int64_t>(i) * dim;
        const float w = weights[i];
        for (int64_t j = 0; j < dim; ++j) dst[j] += w * src[j];
    }
}

void CpuBackend::softmax(const Tensor& x) {
    const int64_t dim = x.cols();
    float* p = x.data<float>();
    for (int64_t t = 0, n = x.rows(); t < n; ++t) cpu::softmax(p + t * dim, dim);
}

void CpuBackend::argmax(const Tensor& x, std::span<int32_t> host_out) {
    const int64_t dim = x.cols();
    const float* p = x.data<float>();
    per_row(x.rows(), [&](int64_t t) {
        host_out[static_cast<size_t>(t)] = static_cast<int32_t>(cpu::argmax(p + t * dim, dim));
    });
}

// The reference: sample_row.h's walk on one thread per row. The engine samples on the host
// with engine::Sampler when the logits are host memory already; this is for checking the
// device's picks (and an engine that asks for them anyway).
void CpuBackend::sample(const Tensor& logits, std::span<const SampleRow> rows,
                        std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                        std::span<int32_t> host_out) {
    check_sample_args(logits, rows, edits, masks, host_out);
    const int64_t dim = logits.cols();
    float* p = logits.data<float>();
    per_row(static_cast<int64_t>(rows.size()), [&](int64_t t) {
        thread_local sample::OneThread g;  // its candidate list is 8 KiB: kept, not rebuilt
        host_out[static_cast<size_t>(t)] =
            sample::draw_row(g, p + t * dim, static_cast<int>(dim), rows[static_cast<size_t>(t)],
                             edits.data(), masks.data());
    });
}

double CpuBackend::measure_read_bandwidth_gbs() {
    return cpu::measure_read_bandwidth_gbs(pool_.size());
}

double CpuBackend::measure_peak_gflops_f32() {
    return cpu::measure_peak_gflops_f32(pool_.size());
}

uint64_t CpuBackend::memory_bytes() const {
    return total_memory_bytes();
}

uint64_t CpuBackend::memory_free_bytes() const {
    return available_memory_bytes();
}

}  // namespace ferry::kernels::cpu
