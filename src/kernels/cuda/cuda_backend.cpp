// kernels::Backend on one NVIDIA GPU: device memory, resident weights, and each op as a kernel on
// one stream (kernels/cuda/launch.h). The host arrays an op is given (tokens, positions, block
// tables) are copied into a per-kind device buffer right before the kernel that reads them; both
// go on the same stream, so the next op's copy cannot overwrite them before that kernel ran.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/weight_decode.h"
#include "kernels/host_math.h"
#include "quant/dequantize.h"
#include "quant/kv_format.h"

namespace ferry::kernels::cuda {
namespace {

// Device memory owned by whoever holds the shared pointer (tensors keep it alive).
std::shared_ptr<void> device_alloc(size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: the device stays usable
        size_t free = 0, total = 0;
        cudaMemGetInfo(&free, &total);
        throw std::runtime_error(fmt::format(
            "out of GPU memory: {:.1f} MiB asked, {:.1f} MiB free of {:.1f} GiB (a smaller "
            "--weights type or --kv-cache-memory, or `ferry plan --device cuda`, says what fits)",
            static_cast<double>(bytes) / (1 << 20), static_cast<double>(free) / (1 << 20),
            static_cast<double>(total) / (1 << 30)));
    }
    check(e,
          fmt::format("cudaMalloc of {:.1f} MiB", static_cast<double>(bytes) / (1 << 20)).c_str());
    return {p, [](void* q) { cudaFree(q); }};
}

size_t tensor_bytes(DType type, std::span<const int64_t> shape) {
    int64_t outer = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) outer *= shape[i];
    return static_cast<size_t>(outer) * row_bytes(type, shape.empty() ? 0 : shape.back());
}

// A growing device buffer for one kind of per-op argument.
struct Arena {
    std::shared_ptr<void> mem;
    size_t cap = 0;
    // Room for n elements, contents undefined (an op's output).
    template <class T>
    T* room(size_t n, cudaStream_t s) {
        const size_t bytes = n * sizeof(T);
        if (bytes > cap) {
            check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
            // Allocated before cap grows: a failed allocation leaves the old buffer and size.
            const size_t grown = std::max<size_t>(bytes, 2 * cap);
            mem = device_alloc(grown);
            cap = grown;
        }
        return static_cast<T*>(mem.get());
    }
    // n host elements copied in, on the stream.
    template <class T>
    T* put(const T* host, size_t n, cudaStream_t s) {
        T* p = room<T>(n, s);
        if (n)
            check(cudaMemcpyAsync(p, host, n * sizeof(T), cudaMemcpyHostToDevice, s),
                  "cudaMemcpyAsync (op arguments)");
        return p;
    }
};

class CudaBackend final : public Backend {
  public:
    CudaBackend(int device, int threads) : device_(device), pool_(threads) {
        check(cudaSetDevice(device_), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaGetDeviceProperties(&props_, device_), "cudaGetDeviceProperties");
    }
    ~CudaBackend() override {
        cudaStreamSynchronize(stream_);
        cudaStreamDestroy(stream_);
    }

    Device device() const override { return Device::CUDA; }
    std::vector<std::pair<std::string, std::string>> describe() const override {
        return {{"backend", "cuda"},
                {"device", props_.name},
                {"compute_capability", fmt::format("{}.{}", props_.major, props_.minor)},
                {"memory_gib",
                 fmt::format("{:.1f}", static_cast<double>(props_.totalGlobalMem) / (1ull << 30))},
                {"activations", "f32"},
                {"weights", "each type's own blocks (f32 where no kernel reads them)"},
                {"threads", std::to_string(pool_.size())}};
    }
    // Products run in float, whatever the CPU's setting.
    Activations activations() const override { return Activations::F32; }
    // Every cache type the CPU keeps (f32, f16, int8, fp8): kv_support's default.

    // ---- memory -------------------------------------------------------------------------
    Tensor alloc(DType type, std::span<const int64_t> shape) override {
        const size_t bytes = tensor_bytes(type, shape);
        auto mem = device_alloc(bytes);
        check(cudaMemsetAsync(mem.get(), 0, bytes, stream_), "cudaMemsetAsync");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        return Tensor(mem.get(), type, shape, Device::CUDA).owned_by(mem);
    }
    void upload(const void* host, const Tensor& dst) override {
        check(cudaMemcpyAsync(dst.raw(), host, dst.bytes(), cudaMemcpyHostToDevice, stream_),
              "upload");
        check(cudaStreamSynchronize(stream_), "upload");
    }
    void download(const Tensor& src, void* host) override {
        check(cudaMemcpyAsync(host, src.raw(), src.bytes(), cudaMemcpyDeviceToHost, stream_),
              "download");
        check(cudaStreamSynchronize(stream_), "download");
    }
    void copy(std::span<const Copy> copies) override {
        for (const Copy& c : copies)
            check(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToDevice, stream_),
                  "device copy");
    }
    Tensor scratch(int slot, DType type, std::initializer_list<int64_t> shape) override {
        if (slot < 0) throw std::invalid_argument("scratch: negative slot");
        if (static_cast<size_t>(slot) >= scratch_.size()) scratch_.resize(slot + 1);
        const std::span<const int64_t> sh(shape.begin(), shape.size());
        const size_t bytes = tensor_bytes(type, sh);
        Arena& a = scratch_[static_cast<size_t>(slot)];
        // Earlier views keep the old buffer alive (their owner) until they are dropped.
        if (bytes > a.cap) a.mem = device_alloc(bytes), a.cap = bytes;
        return Tensor(a.mem.get(), type, sh, Device::CUDA).owned_by(a.mem);
    }
    Tensor host_view(const Tensor& t) override {
        if (t.device() == Device::CPU) return t;
        const size_t bytes = t.bytes();
        if (host_stage_.size() < bytes) host_stage_.resize(bytes);
        download(t, host_stage_.data());
        return Tensor(host_stage_.data(), t.dtype(), t.shape(), Device::CPU);
    }

    // ---- weights ------------------------------------------------------------------------
    std::vector<Matrix> make_resident(
        std::span<const MatrixSource> sources,
        const std::function<void(int64_t, int64_t)>& progress) override {
        int64_t total = 0, done = 0;
        for (const MatrixSource& s : sources) total += static_cast<int64_t>(s.host.bytes());
        std::vector<Matrix> out;
        out.reserve(sources.size());
        for (const MatrixSource& s : sources) {
            out.push_back(resident(s.host));
            done += static_cast<int64_t>(s.host.bytes());
            if (progress) progress(done, total);
        }
        return out;
    }
    Tensor resident_vector(const Tensor& host) override {
        if (host.dtype() != DType::F32) throw std::invalid_argument("resident_vector: f32 only");
        Tensor t = alloc(DType::F32, host.shape());
        upload(host.raw(), t);
        return t;
    }
    size_t bytes_read(const Matrix& w) const override { return w.data.bytes(); }

    // ---- ops ----------------------------------------------------------------------------
    void embed(const Matrix& table, const Batch& b, const Tensor& out) override {
        const int32_t* tok = tokens_.put(b.tokens.data(), b.tokens.size(), stream_);
        cuda::embed(table.data.raw(), table.type(), row_bytes(table.type(), table.cols()),
                    table.cols(), tok, b.n_tokens(), out.data<float>(), stream_);
    }
    void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
        cuda::rmsnorm(x.data<float>(), weight.data<float>(), out.data<float>(), x.rows(), x.cols(),
                      eps, stream_);
    }
    void matmul(std::span<const MatmulOut> outs, const Tensor& x) override {
        for (const MatmulOut& o : outs) {
            if (o.w->cols() != x.cols())
                throw std::invalid_argument(
                    fmt::format("matmul: {} columns against {}", o.w->cols(), x.cols()));
            cuda::matmul(o.w->data.raw(), o.w->type(), row_bytes(o.w->type(), o.w->cols()),
                         o.w->rows(), o.w->cols(), x.data<float>(), x.rows(), o.y.data<float>(),
                         o.w->rows(), stream_);
        }
    }
    void add(const Tensor& x, const Tensor& y) override {
        cuda::add(x.data<float>(), y.data<float>(), x.numel(), stream_);
    }
    void add_bias(const Tensor& y, const Tensor& bias) override {
        cuda::add_bias(y.data<float>(), bias.data<float>(), y.rows(), y.cols(), stream_);
    }
    void silu_mul(const Tensor& gate, const Tensor& up) override {
        cuda::silu_mul(gate.data<float>(), up.data<float>(), gate.numel(), stream_);
    }
    void gelu_mul(const Tensor& gate, const Tensor& up) override {
        cuda::gelu_mul(gate.data<float>(), up.data<float>(), gate.numel(), stream_);
    }
    void scale(const Tensor& x, float s) override {
        cuda::scale(x.data<float>(), s, x.numel(), stream_);
    }
    void softcap(const Tensor& x, float cap) override {
        cuda::softcap(x.data<float>(), cap, x.numel(), stream_);
    }
    void rope_angles(const Batch& b, std::span<const double> inv_freq, float scale,
                     const Tensor& cos_sin) override {
        // On the host, as the CPU computes them (kernels/host_math.h).
        const size_t rope_dim = 2 * inv_freq.size();
        std::vector<float>& cs = angles_host_;
        cs.resize(static_cast<size_t>(b.n_tokens()) * rope_dim);
        for (int64_t t = 0; t < b.n_tokens(); ++t)
            kernels::rope_angles(b.rope_position(t), inv_freq, scale, cs.data() + t * rope_dim);
        check(cudaMemcpyAsync(cos_sin.raw(), cs.data(), cs.size() * sizeof(float),
                              cudaMemcpyHostToDevice, stream_),
              "rope_angles");
    }
    void rope(const Tensor& x, int n_heads, int head_dim, int rope_dim, const Tensor& cos_sin,
              RopeStyle style) override {
        cuda::rope(x.data<float>(), x.rows(), n_heads, head_dim, rope_dim, cos_sin.data<float>(),
                   style == RopeStyle::Neox, stream_);
    }
    void kv_rotate_keys(const KvCacheView& kv, int layer, int32_t block, int rope_dim,
                        std::span<const float> cos_sin, RopeStyle style) override {
        const KvGeometry g = geometry(kv);
        if (kv.dtype == quant::KvDType::Int8)
            throw std::invalid_argument("kv_rotate_keys: int8 keys have fixed per-channel scales");
        if (static_cast<int>(cos_sin.size()) != rope_dim)
            throw std::invalid_argument("kv_rotate_keys: cos_sin must hold rope_dim / 2 pairs");
        const float* cs = floats_.put(cos_sin.data(), cos_sin.size(), stream_);
        cuda::kv_rotate(kv.k_block(layer, block), g, cs, rope_dim, style == RopeStyle::Neox,
                        stream_);
    }
    void kv_write(const KvCacheView& kv, int layer, const Batch& b, const Tensor& k,
                  const Tensor& v) override {
        const KvGeometry g = geometry(kv);
        slots_host_.resize(static_cast<size_t>(b.n_tokens()));
        for (int64_t t = 0; t < b.n_tokens(); ++t) {
            const int64_t pos = b.positions[t];
            const int32_t blk = kv.table(b.seqs[b.token_seq[t]], layer)[pos / kv.block_size];
            slots_host_[t] = {static_cast<int64_t>(kv.region(layer, blk) * kv.k_region),
                              static_cast<int64_t>(kv.region(layer, blk) * kv.v_region),
                              static_cast<int32_t>(pos % kv.block_size), 0};
        }
        const KvSlot* slots = slots_.put(slots_host_.data(), slots_host_.size(), stream_);
        // Clipped int8 key codes go to the store's counter in device memory (atomics: the
        // host's std::atomic is out of the GPU's reach); KvStore::k_clipped reads it.
        cuda::kv_write(kv.k, kv.v, g, slots, k.data<float>(), v.data<float>(), b.n_tokens(),
                       channel_scales(kv, layer),
                       reinterpret_cast<unsigned long long*>(kv.k_clipped_device), stream_);
    }
    void kv_move_slots(const KvCacheView& kv, const BatchSeq& s,
                       std::span<const std::pair<int64_t, int64_t>> moves) override {
        geometry(kv);  // refuses an int8 cache without its key scales
        const size_t eb = quant::kv_elem_bytes(kv.dtype);
        const int n_heads = kv.kv_dim / kv.head_dim;
        const size_t scale_bytes = static_cast<size_t>(n_heads) * sizeof(float);
        for (int key = 0; key < 2; ++key) {
            std::vector<int64_t>& src = offs_host_[0];
            std::vector<int64_t>& dst = offs_host_[1];
            src.clear(), dst.clear();
            // Per-token scales travel with their rows: [layer][move] ranges after the rows'.
            const bool scaled = quant::kv_token_scales(kv.dtype, key != 0);
            std::vector<int64_t> scale_src, scale_dst;
            for (int layer = 0; layer < kv.n_layer; ++layer) {
                const std::span<const int32_t> table = kv.table(s, layer);
                const size_t region = key ? kv.k_region : kv.v_region;
                for (const auto& [from, to] : moves) {
                    const size_t rf = kv.region(layer, table[from / kv.block_size]) * region;
                    const size_t rt = kv.region(layer, table[to / kv.block_size]) * region;
                    for (int h = 0; h < n_heads; ++h) {
                        const size_t hs = static_cast<size_t>(h) * kv.layout.head_stride;
                        src.push_back(static_cast<int64_t>(
                            rf + (hs + (from % kv.block_size) * kv.layout.pos_stride) * eb));
                        dst.push_back(static_cast<int64_t>(
                            rt + (hs + (to % kv.block_size) * kv.layout.pos_stride) * eb));
                    }
                    if (scaled) {
                        scale_src.push_back(static_cast<int64_t>(
                            rf + kv.layout.scale_offset + (from % kv.block_size) * scale_bytes));
                        scale_dst.push_back(static_cast<int64_t>(
                            rt + kv.layout.scale_offset + (to % kv.block_size) * scale_bytes));
                    }
                }
            }
            // Moves run in order (a later one may read a slot an earlier one wrote): one launch
            // per move keeps that, since a launch's copies run in parallel.
            std::byte* base = key ? kv.k : kv.v;
            const size_t n_rows = src.size();
            src.insert(src.end(), scale_src.begin(), scale_src.end());
            dst.insert(dst.end(), scale_dst.begin(), scale_dst.end());
            const int64_t* ds = off_src_.put(src.data(), src.size(), stream_);
            const int64_t* dd = off_dst_.put(dst.data(), dst.size(), stream_);
            for (size_t m = 0; m < moves.size(); ++m) {
                // Entries are [layer][move][head]: this move's rows, layer by layer.
                for (int layer = 0; layer < kv.n_layer; ++layer) {
                    const size_t lm = static_cast<size_t>(layer) * moves.size() + m;
                    const size_t at = lm * n_heads;
                    cuda::copy_ranges(base, ds + at, dd + at, n_heads, kv.head_dim * eb, stream_);
                    if (scaled)
                        cuda::copy_ranges(base, ds + n_rows + lm, dd + n_rows + lm, 1, scale_bytes,
                                          stream_);
                }
            }
        }
    }
    void attention(const KvCacheView& kv, int layer, const Batch& b, const AttentionShape& shape,
                   const Tensor& q, const Tensor& out) override {
        const KvGeometry g = geometry(kv);
        if (shape.n_head <= 0 || shape.n_head_kv <= 0 || shape.n_head % shape.n_head_kv)
            throw std::invalid_argument("attention: query heads must be a multiple of KV heads");
        if (b.n_tokens() == 0) return;
        // Each sequence's table as (key, value) region offsets, and each token's view of it.
        table_host_.clear();
        std::vector<int64_t> seq_off(b.seqs.size());
        for (size_t s = 0; s < b.seqs.size(); ++s) {
            seq_off[s] = static_cast<int64_t>(table_host_.size() / 2);
            for (int32_t blk : kv.table(b.seqs[s], layer)) {
                table_host_.push_back(static_cast<int64_t>(kv.region(layer, blk) * kv.k_region));
                table_host_.push_back(static_cast<int64_t>(kv.region(layer, blk) * kv.v_region));
            }
        }
        // H2O's mass: every asking sequence's n_tokens x n_head x n_blocks, back to back.
        std::vector<int64_t> mass_off(b.seqs.size(), -1), first(b.seqs.size(), -1);
        int64_t mass_total = 0;
        for (size_t s = 0; s < b.seqs.size(); ++s)
            if (b.seqs[s].attn_mass) {
                mass_off[s] = mass_total;
                mass_total += static_cast<int64_t>(b.seqs[s].n_tokens) * shape.n_head *
                              static_cast<int64_t>(kv.table(b.seqs[s], layer).size());
            }
        for (int64_t t = b.n_tokens() - 1; t >= 0; --t) first[b.token_seq[t]] = t;
        tokens_host_.resize(static_cast<size_t>(b.n_tokens()));
        for (int64_t t = 0; t < b.n_tokens(); ++t) {
            const size_t s = static_cast<size_t>(b.token_seq[t]);
            const BatchSeq& bs = b.seqs[s];
            const int64_t pos = b.positions[t];
            const auto n_blocks = static_cast<int32_t>(kv.table(bs, layer).size());
            AttnToken& at = tokens_host_[static_cast<size_t>(t)];
            at = {pos + 1, 0, -1, 0, seq_off[s], -1, n_blocks, 0};
            if (shape.window > 0) {
                // A tree token's window ends at its own position, below its slot.
                const int64_t wpos = bs.tree.empty() ? pos : b.rope_position(t) - bs.rope_offset;
                if (!bs.tree.empty() && wpos + 1 - shape.window > bs.start_pos)
                    throw std::invalid_argument(
                        "attention: a draft tree deeper than the sliding window");
                at.kv_start = std::max<int64_t>(0, wpos + 1 - shape.window);
            }
            if (!bs.tree.empty()) {
                at.tree_start = bs.start_pos;
                at.tree_mask = bs.tree[static_cast<size_t>(t - bs.first_token)];
            }
            if (mass_off[s] >= 0)
                at.mass_off = mass_off[s] + (t - first[s]) * shape.n_head * n_blocks;
        }
        const int64_t* table = table_.put(table_host_.data(), table_host_.size(), stream_);
        const AttnToken* toks = attn_tokens_.put(tokens_host_.data(), tokens_host_.size(), stream_);
        float* mass = nullptr;
        if (mass_total > 0) {
            mass_host_.assign(static_cast<size_t>(mass_total), 0.0f);
            mass = floats_.put(mass_host_.data(), mass_host_.size(), stream_);
        }
        // Flash-decoding: where the (token, head) pairs are too few to give every
        // multiprocessor two blocks, each token's span is split, down to 256 positions a share
        // (H2O's mass needs the whole span's softmax in one block, so it never splits).
        int64_t longest = 0;
        for (const AttnToken& at : tokens_host_) longest = std::max(longest, at.n_kv - at.kv_start);
        const int64_t pairs = b.n_tokens() * shape.n_head;
        int shares = 1;
        if (mass_total == 0) {
            const int64_t want = (2 * int64_t{props_.multiProcessorCount} + pairs - 1) / pairs;
            shares = static_cast<int>(std::clamp<int64_t>(std::min(want, longest / 256), 1, 64));
        }
        float* part = shares > 1
                          ? split_.room<float>(
                                static_cast<size_t>(pairs * shares * (g.head_dim + 2)), stream_)
                          : nullptr;
        cuda::attention(kv.k, kv.v, g, channel_scales(kv, layer), table, toks, b.n_tokens(),
                        shape.n_head, shape.n_head_kv, shape.scale, q.data<float>(),
                        out.data<float>(), mass, shares, part, stream_);
        if (mass_total > 0) {
            check(cudaMemcpyAsync(mass_host_.data(), mass, mass_host_.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, stream_),
                  "attention mass");
            check(cudaStreamSynchronize(stream_), "attention mass");
            for (size_t s = 0; s < b.seqs.size(); ++s)
                if (mass_off[s] >= 0) {
                    const int64_t n = static_cast<int64_t>(b.seqs[s].n_tokens) * shape.n_head *
                                      static_cast<int64_t>(kv.table(b.seqs[s], layer).size());
                    for (int64_t i = 0; i < n; ++i)
                        b.seqs[s].attn_mass[i] += mass_host_[static_cast<size_t>(mass_off[s] + i)];
                }
        }
    }
    void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) override {
        const int32_t* r = rows_.put(rows.data(), rows.size(), stream_);
        cuda::gather_rows(static_cast<const std::byte*>(x.raw()), r,
                          static_cast<int64_t>(rows.size()), x.row_bytes(),
                          static_cast<std::byte*>(out.raw()), stream_);
    }
    void add_rows_scaled(const Tensor& x, std::span<const int32_t> rows,
                         std::span<const float> weights, const Tensor& y) override {
        const int32_t* r = rows_.put(rows.data(), rows.size(), stream_);
        const float* w = floats_.put(weights.data(), weights.size(), stream_);
        cuda::add_rows_scaled(x.data<float>(), r, w, y.data<float>(),
                              static_cast<int64_t>(rows.size()), x.cols(), stream_);
    }
    void softmax(const Tensor& x) override {
        cuda::softmax(x.data<float>(), x.rows(), x.cols(), stream_);
    }
    void argmax(const Tensor& x, std::span<int32_t> host_out) override {
        if (static_cast<int64_t>(host_out.size()) < x.rows())
            throw std::invalid_argument("argmax: fewer outputs than rows");
        int32_t* idx = picks_.room<int32_t>(static_cast<size_t>(x.rows()), stream_);
        cuda::argmax(x.data<float>(), x.rows(), x.cols(), idx, stream_);
        check(cudaMemcpyAsync(host_out.data(), idx, static_cast<size_t>(x.rows()) * 4,
                              cudaMemcpyDeviceToHost, stream_),
              "argmax");
        check(cudaStreamSynchronize(stream_), "argmax");
    }

    void sample(const Tensor& logits, std::span<const SampleRow> rows,
                std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                std::span<int32_t> host_out) override {
        check_sample_args(logits, rows, edits, masks, host_out);
        if (rows.empty()) return;
        const SampleRow* r = sample_rows_.put(rows.data(), rows.size(), stream_);
        const LogitEdit* e = edits_.put(edits.data(), edits.size(), stream_);
        const uint64_t* m = masks_.put(masks.data(), masks.size(), stream_);
        int32_t* idx = picks_.room<int32_t>(rows.size(), stream_);
        cuda::sample(logits.data<float>(), static_cast<int64_t>(rows.size()), logits.cols(), r, e,
                     m, idx, stream_);
        check(
            cudaMemcpyAsync(host_out.data(), idx, rows.size() * 4, cudaMemcpyDeviceToHost, stream_),
            "sample");
        check(cudaStreamSynchronize(stream_), "sample");
    }

    // ---- the host side ------------------------------------------------------------------
    ThreadPool& host_pool() override { return pool_; }
    double measure_read_bandwidth_gbs() override {
        check(cudaStreamSynchronize(stream_), "sync");
        size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        // Far beyond the L2 (50 MB on an H100), within what is free.
        return read_bandwidth_gbs(std::min<size_t>(size_t{2} << 30, free / 4));
    }
    double measure_peak_gflops_f32() override {
        check(cudaStreamSynchronize(stream_), "sync");
        return peak_gflops_f32();
    }
    uint64_t memory_bytes() const override { return props_.totalGlobalMem; }
    uint64_t memory_free_bytes() const override {
        size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return free;
    }

  private:
    // A matrix in device memory in its file's own format (f16, f32, or blocks weight_decode.h
    // reads in the kernels), rows packed end to end. A type no kernel reads yet is widened to
    // f32: exactly the values the CPU's reference computes with, at 4 bytes a weight.
    Matrix resident(const Tensor& host) {
        if (host.ndim() != 2) throw std::invalid_argument("make_resident: a matrix has 2 dims");
        const int64_t rows = host.rows(), cols = host.cols();
        const size_t src_stride = host.stride(0);
        const auto* src = static_cast<const std::byte*>(host.raw());
        const int64_t shape[] = {rows, cols};
        Matrix m;
        const DType type = host.dtype();
        if (type == DType::F16 || type == DType::F32 || decode::native(type, cols)) {
            const size_t rb = row_bytes(type, cols);
            std::vector<std::byte> h(static_cast<size_t>(rows) * rb);
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(h.data() + r * rb, src + r * src_stride, rb);
            m.data = alloc(type, shape);
            upload(h.data(), m.data);
            return m;
        }
        std::vector<float> all(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r)
            if (Status s =
                    quant::dequantize_row(type, src + r * src_stride, all.data() + r * cols, cols);
                !s)
                throw std::invalid_argument(s.error().message);
        m.data = alloc(DType::F32, shape);
        upload(all.data(), m.data);
        return m;
    }

    KvGeometry geometry(const KvCacheView& kv) const {
        if (kv.dtype == quant::KvDType::Int8 && !kv.k_channel_scales)
            throw std::invalid_argument("an int8 KV cache needs its keys' calibrated scales");
        return {kv.block_size,
                kv.kv_dim,
                kv.head_dim,
                static_cast<int>(kv.dtype),
                static_cast<int64_t>(kv.layout.pos_stride),
                static_cast<int64_t>(kv.layout.head_stride),
                static_cast<int64_t>(kv.layout.scale_offset)};
    }
    // This layer's int8 key scales (null for other caches): the store keeps them in the
    // backend's memory, so on the device already.
    static const float* channel_scales(const KvCacheView& kv, int layer) {
        if (kv.dtype != quant::KvDType::Int8) return nullptr;
        return kv.k_channel_scales + static_cast<size_t>(layer) * kv.kv_dim;
    }

    int device_;
    ThreadPool pool_;
    cudaStream_t stream_ = nullptr;
    cudaDeviceProp props_{};
    std::vector<Arena> scratch_;
    Arena tokens_, rows_, floats_, slots_, table_, attn_tokens_, off_src_, off_dst_, picks_,
        sample_rows_, edits_, masks_;
    std::vector<std::byte> host_stage_;
    std::vector<float> angles_host_, mass_host_;
    std::vector<KvSlot> slots_host_;
    std::vector<int64_t> table_host_;
    Arena split_;  // flash-decoding's partial results
    std::vector<AttnToken> tokens_host_;
    std::vector<int64_t> offs_host_[2];
};

}  // namespace

bool device_present(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why) {
            int runtime = 0;
            cudaRuntimeGetVersion(&runtime);
            if (e == cudaErrorInsufficientDriver)
                *why = fmt::format(
                    "no NVIDIA driver found, or one older than this build's CUDA runtime ({}.{})",
                    runtime / 1000, runtime % 1000 / 10);
            else if (e != cudaSuccess)
                *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
            else
                *why = "no CUDA device";
        }
        cudaGetLastError();  // clear it: the CPU path goes on
        return false;
    }
    return true;
}

Expected<std::shared_ptr<Backend>> make_cuda_backend(const BackendOptions& o) {
    std::string why;
    if (!device_present(&why)) return make_error(ErrorCode::Unavailable, "{}", why);
    try {
        const int threads = o.threads > 0 ? o.threads : physical_core_count();
        return std::shared_ptr<Backend>(std::make_shared<CudaBackend>(0, threads));
    } catch (const std::exception& e) {
        return make_error(ErrorCode::Unavailable, "{}", e.what());
    }
}

}  // namespace ferry::kernels::cuda
