// kernels::Backend on one NVIDIA GPU: device memory, resident weights, and each op as a kernel on
// one stream (kernels/cuda/launch.h). Ops do not launch when called: each records its launch in a
// LaunchQueue (the host arrays it is given, tokens, positions and block tables, staged beside), and
// the queue runs when a result must reach the host or memory changes hands: one copy of the staged
// bytes, then the launches, eagerly or as a CUDA graph captured from an earlier queue with the same
// signature (graph_cache.h; --cuda-graphs on|off). A decode step is one such queue, ending in
// its argmax or draw.
#include "kernels/cuda/cuda_backend.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "core/thread_pool.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/graph_cache.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/launch_queue.h"
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

// A growing device buffer an op writes into (outputs, partial results).
struct Arena {
    std::shared_ptr<void> mem;
    size_t cap = 0;
    bool fits(size_t bytes) const { return bytes <= cap; }
    // Room for n elements, contents undefined; the caller has made sure no recorded or running
    // launch still uses the old buffer when it grows.
    template <class T>
    T* room(size_t n) {
        const size_t bytes = n * sizeof(T);
        if (bytes > cap) {
            // Allocated before cap grows: a failed allocation leaves the old buffer and size.
            const size_t grown = std::max<size_t>(bytes, 2 * cap);
            mem = device_alloc(grown);
            cap = grown;
        }
        return static_cast<T*>(mem.get());
    }
};

// Pinned host memory (cudaHostAlloc): a copy from it is truly asynchronous and may be captured in
// a graph, which reads it again at every replay.
struct Pinned {
    std::byte* p = nullptr;
    size_t cap = 0;
    Pinned() = default;
    Pinned(const Pinned&) = delete;
    Pinned& operator=(const Pinned&) = delete;
    ~Pinned() {
        if (p) cudaFreeHost(p);
    }
    void grow(size_t bytes) {
        if (bytes <= cap) return;
        const size_t grown = std::max<size_t>(bytes, 2 * cap);
        void* q = nullptr;
        check(cudaHostAlloc(&q, grown, cudaHostAllocDefault), "cudaHostAlloc (op arguments)");
        if (p) cudaFreeHost(p);
        p = static_cast<std::byte*>(q);
        cap = grown;
    }
};

cudaStream_t stream_of(const LaunchEnv& e) {
    return static_cast<cudaStream_t>(e.stream);
}

// ---- the recorded launches: each a struct of plain values and the function that launches it --

struct CopyArgs {  // device to device; from the staged bytes where src is null
    void* dst;
    const void* src;
    uint64_t staged;
    size_t bytes;
};
void launch_copy(const CopyArgs& a, const LaunchEnv& e) {
    const void* src = a.src ? a.src : e.at<const std::byte>(a.staged);
    check(cudaMemcpyAsync(a.dst, src, a.bytes, cudaMemcpyDeviceToDevice, stream_of(e)),
          "device copy");
}

struct EmbedArgs {
    const void* table;
    size_t row_bytes;
    int64_t cols, n;
    uint64_t tokens;  // staged
    float* out;
    DType type;
};
void launch_embed(const EmbedArgs& a, const LaunchEnv& e) {
    embed(a.table, a.type, a.row_bytes, a.cols, e.at<const int32_t>(a.tokens), a.n, a.out,
          stream_of(e));
}

struct RowsArgs {  // rmsnorm, softmax
    const float* x;
    const float* w;
    float* out;
    int64_t rows, cols;
    float eps;
};
void launch_rmsnorm(const RowsArgs& a, const LaunchEnv& e) {
    rmsnorm(a.x, a.w, a.out, a.rows, a.cols, a.eps, stream_of(e));
}
void launch_softmax(const RowsArgs& a, const LaunchEnv& e) {
    softmax(a.out, a.rows, a.cols, stream_of(e));
}

struct MatmulArgs {
    const void* w;
    size_t row_bytes;
    int64_t rows, cols, n_tokens, ldy;
    const float* x;
    float* y;
    DType type;
};
void launch_matmul(const MatmulArgs& a, const LaunchEnv& e) {
    matmul(a.w, a.type, a.row_bytes, a.rows, a.cols, a.x, a.n_tokens, a.y, a.ldy, stream_of(e));
}

enum class Elementwise : int { Add, AddBias, SiluMul, GeluMul, Scale, Softcap };
struct ElementwiseArgs {
    float* x;
    const float* y;
    int64_t n, rows, cols;
    float s;
    Elementwise op;
};
void launch_elementwise(const ElementwiseArgs& a, const LaunchEnv& e) {
    const cudaStream_t s = stream_of(e);
    switch (a.op) {
        case Elementwise::Add:
            add(a.x, a.y, a.n, s);
            break;
        case Elementwise::AddBias:
            add_bias(a.x, a.y, a.rows, a.cols, s);
            break;
        case Elementwise::SiluMul:
            silu_mul(a.x, a.y, a.n, s);
            break;
        case Elementwise::GeluMul:
            gelu_mul(a.x, a.y, a.n, s);
            break;
        case Elementwise::Scale:
            scale(a.x, a.s, a.n, s);
            break;
        case Elementwise::Softcap:
            softcap(a.x, a.s, a.n, s);
            break;
    }
}

struct RopeArgs {
    float* x;
    const float* cos_sin;
    int64_t rows;
    int n_heads, head_dim, rope_dim, neox;
};
void launch_rope(const RopeArgs& a, const LaunchEnv& e) {
    rope(a.x, a.rows, a.n_heads, a.head_dim, a.rope_dim, a.cos_sin, a.neox != 0, stream_of(e));
}

// A launch's bytes are its identity (launch_queue.h): a struct copied into them whole must have no
// padding, whose bytes the copy would carry over from wherever it was built.
static_assert(std::has_unique_object_representations_v<KvGeometry>);

struct KvRotateArgs {
    std::byte* region;
    KvGeometry g;
    uint64_t cos_sin;  // staged
    int rope_dim, neox;
};
void launch_kv_rotate(const KvRotateArgs& a, const LaunchEnv& e) {
    kv_rotate(a.region, a.g, e.at<const float>(a.cos_sin), a.rope_dim, a.neox != 0, stream_of(e));
}

struct KvWriteArgs {
    std::byte* k_base;
    std::byte* v_base;
    KvGeometry g;
    uint64_t slots;  // staged
    const float* k;
    const float* v;
    int64_t n_tokens;
    const float* k_channel;
    unsigned long long* clipped;
};
void launch_kv_write(const KvWriteArgs& a, const LaunchEnv& e) {
    kv_write(a.k_base, a.v_base, a.g, e.at<const KvSlot>(a.slots), a.k, a.v, a.n_tokens,
             a.k_channel, a.clipped, stream_of(e));
}

struct CopyRangesArgs {
    std::byte* base;
    uint64_t src_off, dst_off;  // staged
    int64_t n;
    size_t bytes;
};
void launch_copy_ranges(const CopyRangesArgs& a, const LaunchEnv& e) {
    copy_ranges(a.base, e.at<const int64_t>(a.src_off), e.at<const int64_t>(a.dst_off), a.n,
                a.bytes, stream_of(e));
}

struct AttentionArgs {
    const std::byte* k_base;
    const std::byte* v_base;
    KvGeometry g;
    const float* k_channel;
    uint64_t table, tokens;  // staged
    int64_t n_tokens;
    int n_head, n_head_kv;
    float scale;
    int shares;
    const float* q;
    float* out;
    int64_t mass;  // staged offset, or < 0: none
    float* part;
};
void launch_attention(const AttentionArgs& a, const LaunchEnv& e) {
    attention(a.k_base, a.v_base, a.g, a.k_channel, e.at<const int64_t>(a.table),
              e.at<const AttnToken>(a.tokens), a.n_tokens, a.n_head, a.n_head_kv, a.scale, a.q,
              a.out, a.mass >= 0 ? e.at<float>(static_cast<uint64_t>(a.mass)) : nullptr, a.shares,
              a.part, stream_of(e));
}

struct RowsOpArgs {  // gather_rows, add_rows_scaled
    const std::byte* x;
    std::byte* out;
    uint64_t rows, weights;  // staged
    int64_t n, cols;
    size_t row_bytes;
    const float* y;
};
void launch_gather_rows(const RowsOpArgs& a, const LaunchEnv& e) {
    gather_rows(a.x, e.at<const int32_t>(a.rows), a.n, a.row_bytes, a.out, stream_of(e));
}
void launch_add_rows_scaled(const RowsOpArgs& a, const LaunchEnv& e) {
    add_rows_scaled(reinterpret_cast<float*>(a.out), e.at<const int32_t>(a.rows),
                    e.at<const float>(a.weights), a.y, a.n, a.cols, stream_of(e));
}

struct PickArgs {  // argmax, sample: ids into `picks`, then to the pinned `host`
    float* x;
    int64_t rows, cols;
    uint64_t sample_rows, edits, masks;  // staged (sample)
    int32_t* picks;
    int32_t* host;
};
void launch_argmax(const PickArgs& a, const LaunchEnv& e) {
    argmax(a.x, a.rows, a.cols, a.picks, stream_of(e));
    check(cudaMemcpyAsync(a.host, a.picks, static_cast<size_t>(a.rows) * 4, cudaMemcpyDeviceToHost,
                          stream_of(e)),
          "argmax");
}
void launch_sample(const PickArgs& a, const LaunchEnv& e) {
    sample(a.x, a.rows, a.cols, e.at<const SampleRow>(a.sample_rows),
           e.at<const LogitEdit>(a.edits), e.at<const uint64_t>(a.masks), a.picks, stream_of(e));
    check(cudaMemcpyAsync(a.host, a.picks, static_cast<size_t>(a.rows) * 4, cudaMemcpyDeviceToHost,
                          stream_of(e)),
          "sample");
}

class CudaBackend final : public Backend {
  public:
    CudaBackend(int device, int threads, bool graphs)
        : device_(device), pool_(threads), graphs_(GraphCache::Options{.enabled = graphs}) {
        check(cudaSetDevice(device_), "cudaSetDevice");
        check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        check(cudaGetDeviceProperties(&props_, device_), "cudaGetDeviceProperties");
    }
    ~CudaBackend() override {
        // Launches still recorded are dropped, not run: the memory they name (weights, a KV
        // pool) may be gone already, and nobody is left to read what they would compute.
        queue_.clear();
        cudaStreamSynchronize(stream_);
        for (void* g : graphs_.take_all()) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(g));
        cudaStreamDestroy(stream_);
    }

    Device device() const override { return Device::CUDA; }
    std::vector<std::pair<std::string, std::string>> describe() const override {
        const GraphCache::Stats& g = graphs_.stats();
        return {{"backend", "cuda"},
                {"device", props_.name},
                {"compute_capability", fmt::format("{}.{}", props_.major, props_.minor)},
                {"memory_gib",
                 fmt::format("{:.1f}", static_cast<double>(props_.totalGlobalMem) / (1ull << 30))},
                {"activations", "f32"},
                {"weights", "each type's own blocks (f32 where no kernel reads them)"},
                {"cuda_graphs",
                 graphs_.enabled()
                     ? fmt::format("on ({} captured, {} replays, {} eager runs, {} refused)",
                                   g.captured, g.replayed, g.eager, g.refused)
                     : "off"},
                {"threads", std::to_string(pool_.size())}};
    }
    // Products run in float, whatever the CPU's setting.
    Activations activations() const override { return Activations::F32; }
    // Every cache type the CPU keeps (f32, f16, int8, fp8): kv_support's default.

    // ---- memory: each waits for the recorded launches first --------------------------------
    Tensor alloc(DType type, std::span<const int64_t> shape) override {
        finish();
        const size_t bytes = tensor_bytes(type, shape);
        auto mem = device_alloc(bytes);
        check(cudaMemsetAsync(mem.get(), 0, bytes, stream_), "cudaMemsetAsync");
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        return Tensor(mem.get(), type, shape, Device::CUDA).owned_by(mem);
    }
    void upload(const void* host, const Tensor& dst) override {
        finish();
        check(cudaMemcpyAsync(dst.raw(), host, dst.bytes(), cudaMemcpyHostToDevice, stream_),
              "upload");
        check(cudaStreamSynchronize(stream_), "upload");
    }
    void download(const Tensor& src, void* host) override {
        finish();
        check(cudaMemcpyAsync(host, src.raw(), src.bytes(), cudaMemcpyDeviceToHost, stream_),
              "download");
        check(cudaStreamSynchronize(stream_), "download");
    }
    void copy(std::span<const Copy> copies) override {
        for (const Copy& c : copies) {
            CopyArgs& a = queue_.record(&launch_copy);
            a.dst = c.dst, a.src = c.src, a.bytes = c.bytes;
        }
    }
    Tensor scratch(int slot, DType type, std::initializer_list<int64_t> shape) override {
        if (slot < 0) throw std::invalid_argument("scratch: negative slot");
        if (static_cast<size_t>(slot) >= scratch_.size()) scratch_.resize(slot + 1);
        const std::span<const int64_t> sh(shape.begin(), shape.size());
        const size_t bytes = tensor_bytes(type, sh);
        Arena& a = scratch_[static_cast<size_t>(slot)];
        // Earlier views keep the old buffer alive (their owner) until they are dropped, and the
        // queue keeps the views its launches use.
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

    // ---- ops: recorded, run by finish() ---------------------------------------------------
    void embed(const Matrix& table, const Batch& b, const Tensor& out) override {
        const uint64_t tok = queue_.stage(b.tokens.data(), b.tokens.size());
        EmbedArgs& a = queue_.record(&launch_embed);
        a.table = table.data.raw(), a.type = table.type();
        a.row_bytes = row_bytes(table.type(), table.cols()), a.cols = table.cols();
        a.tokens = tok, a.n = b.n_tokens(), a.out = out.data<float>();
        queue_.keep(out);
    }
    void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override {
        RowsArgs& a = queue_.record(&launch_rmsnorm);
        a.x = x.data<float>(), a.w = weight.data<float>(), a.out = out.data<float>();
        a.rows = x.rows(), a.cols = x.cols(), a.eps = eps;
        queue_.keep(x, out);
    }
    void matmul(std::span<const MatmulOut> outs, const Tensor& x) override {
        for (const MatmulOut& o : outs) {
            if (o.w->cols() != x.cols())
                throw std::invalid_argument(
                    fmt::format("matmul: {} columns against {}", o.w->cols(), x.cols()));
            MatmulArgs& a = queue_.record(&launch_matmul);
            a.w = o.w->data.raw(), a.type = o.w->type();
            a.row_bytes = row_bytes(o.w->type(), o.w->cols());
            a.rows = o.w->rows(), a.cols = o.w->cols(), a.n_tokens = x.rows();
            a.ldy = o.w->rows(), a.x = x.data<float>(), a.y = o.y.data<float>();
            queue_.keep(o.y);
        }
        queue_.keep(x);
    }
    void add(const Tensor& x, const Tensor& y) override { elementwise(Elementwise::Add, x, &y, 0); }
    void add_bias(const Tensor& y, const Tensor& bias) override {
        elementwise(Elementwise::AddBias, y, &bias, 0);
    }
    void silu_mul(const Tensor& gate, const Tensor& up) override {
        elementwise(Elementwise::SiluMul, gate, &up, 0);
    }
    void gelu_mul(const Tensor& gate, const Tensor& up) override {
        elementwise(Elementwise::GeluMul, gate, &up, 0);
    }
    void scale(const Tensor& x, float s) override {
        elementwise(Elementwise::Scale, x, nullptr, s);
    }
    void softcap(const Tensor& x, float cap) override {
        elementwise(Elementwise::Softcap, x, nullptr, cap);
    }
    void rope_angles(const Batch& b, std::span<const double> inv_freq, float scale,
                     const Tensor& cos_sin) override {
        // On the host, as the CPU computes them (kernels/host_math.h), then copied in.
        const size_t rope_dim = 2 * inv_freq.size();
        std::vector<float>& cs = angles_host_;
        cs.resize(static_cast<size_t>(b.n_tokens()) * rope_dim);
        for (int64_t t = 0; t < b.n_tokens(); ++t)
            kernels::rope_angles(b.rope_position(t), inv_freq, scale, cs.data() + t * rope_dim);
        const uint64_t at = queue_.stage(cs.data(), cs.size());
        CopyArgs& a = queue_.record(&launch_copy);
        a.dst = cos_sin.raw(), a.staged = at, a.bytes = cs.size() * sizeof(float);
        queue_.keep(cos_sin);
    }
    void rope(const Tensor& x, int n_heads, int head_dim, int rope_dim, const Tensor& cos_sin,
              RopeStyle style) override {
        RopeArgs& a = queue_.record(&launch_rope);
        a.x = x.data<float>(), a.cos_sin = cos_sin.data<float>(), a.rows = x.rows();
        a.n_heads = n_heads, a.head_dim = head_dim, a.rope_dim = rope_dim;
        a.neox = style == RopeStyle::Neox;
        queue_.keep(x, cos_sin);
    }
    void kv_rotate_keys(const KvCacheView& kv, int layer, int32_t block, int rope_dim,
                        std::span<const float> cos_sin, RopeStyle style) override {
        const KvGeometry g = geometry(kv);
        if (kv.dtype == quant::KvDType::Int8)
            throw std::invalid_argument("kv_rotate_keys: int8 keys have fixed per-channel scales");
        if (static_cast<int>(cos_sin.size()) != rope_dim)
            throw std::invalid_argument("kv_rotate_keys: cos_sin must hold rope_dim / 2 pairs");
        const uint64_t cs = queue_.stage(cos_sin.data(), cos_sin.size());
        KvRotateArgs& a = queue_.record(&launch_kv_rotate);
        a.region = kv.k_block(layer, block), a.g = g, a.cos_sin = cs;
        a.rope_dim = rope_dim, a.neox = style == RopeStyle::Neox;
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
        const uint64_t slots = queue_.stage(slots_host_.data(), slots_host_.size());
        // Clipped int8 key codes go to the store's counter in device memory (atomics: the
        // host's std::atomic is out of the GPU's reach); KvStore::k_clipped reads it.
        KvWriteArgs& a = queue_.record(&launch_kv_write);
        a.k_base = kv.k, a.v_base = kv.v, a.g = g, a.slots = slots;
        a.k = k.data<float>(), a.v = v.data<float>(), a.n_tokens = b.n_tokens();
        a.k_channel = channel_scales(kv, layer);
        a.clipped = reinterpret_cast<unsigned long long*>(kv.k_clipped_device);
        queue_.keep(k, v);
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
            const uint64_t ds = queue_.stage(src.data(), src.size());
            const uint64_t dd = queue_.stage(dst.data(), dst.size());
            const auto range = [&](size_t first, int64_t n, size_t bytes) {
                CopyRangesArgs& a = queue_.record(&launch_copy_ranges);
                a.base = base, a.src_off = ds + first * sizeof(int64_t);
                a.dst_off = dd + first * sizeof(int64_t), a.n = n, a.bytes = bytes;
            };
            for (size_t m = 0; m < moves.size(); ++m) {
                // Entries are [layer][move][head]: this move's rows, layer by layer.
                for (int layer = 0; layer < kv.n_layer; ++layer) {
                    const size_t lm = static_cast<size_t>(layer) * moves.size() + m;
                    range(lm * n_heads, n_heads, kv.head_dim * eb);
                    if (scaled) range(n_rows + lm, 1, scale_bytes);
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
        float* part =
            shares > 1 ? room<float>(split_, static_cast<size_t>(pairs * shares * (g.head_dim + 2)))
                       : nullptr;
        const uint64_t table = queue_.stage(table_host_.data(), table_host_.size());
        const uint64_t toks = queue_.stage(tokens_host_.data(), tokens_host_.size());
        // The mass accumulates into zeroed staged room, read back once the queue ran.
        const int64_t mass =
            mass_total > 0
                ? static_cast<int64_t>(queue_.reserve(static_cast<size_t>(mass_total) * 4))
                : -1;
        AttentionArgs& a = queue_.record(&launch_attention);
        a.k_base = kv.k, a.v_base = kv.v, a.g = g, a.k_channel = channel_scales(kv, layer);
        a.table = table, a.tokens = toks, a.n_tokens = b.n_tokens();
        a.n_head = shape.n_head, a.n_head_kv = shape.n_head_kv, a.scale = shape.scale;
        a.shares = shares, a.q = q.data<float>(), a.out = out.data<float>(), a.mass = mass;
        a.part = part;
        queue_.keep(q, out);
        if (mass_total > 0) {
            // Eagerly: a queue per layer would crowd the step's graphs out of the cache.
            const std::byte* dev_mass = finish(false) + mass;
            mass_host_.resize(static_cast<size_t>(mass_total));
            check(cudaMemcpy(mass_host_.data(), dev_mass, mass_host_.size() * sizeof(float),
                             cudaMemcpyDeviceToHost),
                  "attention mass");
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
        const uint64_t r = queue_.stage(rows.data(), rows.size());
        RowsOpArgs& a = queue_.record(&launch_gather_rows);
        a.x = static_cast<const std::byte*>(x.raw()), a.out = static_cast<std::byte*>(out.raw());
        a.rows = r, a.n = static_cast<int64_t>(rows.size()), a.row_bytes = x.row_bytes();
        queue_.keep(x, out);
    }
    void add_rows_scaled(const Tensor& x, std::span<const int32_t> rows,
                         std::span<const float> weights, const Tensor& y) override {
        const uint64_t r = queue_.stage(rows.data(), rows.size());
        const uint64_t w = queue_.stage(weights.data(), weights.size());
        RowsOpArgs& a = queue_.record(&launch_add_rows_scaled);
        a.out = static_cast<std::byte*>(x.raw()), a.rows = r, a.weights = w;
        a.y = y.data<float>(), a.n = static_cast<int64_t>(rows.size()), a.cols = x.cols();
        queue_.keep(x, y);
    }
    void softmax(const Tensor& x) override {
        RowsArgs& a = queue_.record(&launch_softmax);
        a.out = x.data<float>(), a.rows = x.rows(), a.cols = x.cols();
        queue_.keep(x);
    }
    void argmax(const Tensor& x, std::span<int32_t> host_out) override {
        if (static_cast<int64_t>(host_out.size()) < x.rows())
            throw std::invalid_argument("argmax: fewer outputs than rows");
        const auto n = static_cast<size_t>(x.rows());
        pick_args(&launch_argmax, x, n, pick_room(n));
        finish();
        std::memcpy(host_out.data(), picks_host_.p, static_cast<size_t>(x.rows()) * 4);
    }

    void sample(const Tensor& logits, std::span<const SampleRow> rows,
                std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                std::span<int32_t> host_out) override {
        check_sample_args(logits, rows, edits, masks, host_out);
        if (rows.empty()) return;
        // Before staging: making room may run the queue, which takes the staged bytes along.
        int32_t* picks = pick_room(rows.size());
        const uint64_t r = queue_.stage(rows.data(), rows.size());
        const uint64_t e = queue_.stage(edits.data(), edits.size());
        const uint64_t m = queue_.stage(masks.data(), masks.size());
        PickArgs& a = pick_args(&launch_sample, logits, rows.size(), picks);
        a.sample_rows = r, a.edits = e, a.masks = m;
        finish();
        std::memcpy(host_out.data(), picks_host_.p, rows.size() * 4);
    }

    void synchronize() override { finish(); }

    // ---- the host side ------------------------------------------------------------------
    ThreadPool& host_pool() override { return pool_; }
    double measure_read_bandwidth_gbs() override {
        finish();
        size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        // Far beyond the L2 (50 MB on an H100), within what is free.
        return read_bandwidth_gbs(std::min<size_t>(size_t{2} << 30, free / 4));
    }
    double measure_peak_gflops_f32() override {
        finish();
        return peak_gflops_f32();
    }
    uint64_t memory_bytes() const override { return props_.totalGlobalMem; }
    uint64_t memory_free_bytes() const override {
        size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return free;
    }

  private:
    void elementwise(Elementwise op, const Tensor& x, const Tensor* y, float s) {
        ElementwiseArgs& a = queue_.record(&launch_elementwise);
        a.op = op, a.x = x.data<float>(), a.y = y ? y->data<float>() : nullptr, a.s = s;
        a.n = x.numel(), a.rows = x.rows(), a.cols = x.cols();
        queue_.keep(x);
        if (y) queue_.keep(*y);
    }
    // Room in an op's output buffer. Growing it frees the old one, which recorded launches may
    // name: they run (and finish) first.
    template <class T>
    T* room(Arena& a, size_t n) {
        if (!a.fits(n * sizeof(T))) finish();
        return a.room<T>(n);
    }
    // Room for n picked ids on the device (picks_) and in pinned memory (picks_host_); either
    // growing runs the queue first.
    int32_t* pick_room(size_t n) {
        int32_t* picks = room<int32_t>(picks_, n);
        if (picks_host_.cap < n * 4) {
            finish();
            picks_host_.grow(n * 4);
        }
        return picks;
    }
    // An argmax or a draw of n rows of x: ids into picks, then into the pinned picks_host_.
    template <class F>
    PickArgs& pick_args(F fn, const Tensor& x, size_t n, int32_t* picks) {
        PickArgs& a = queue_.record(fn);
        a.x = x.data<float>(), a.rows = static_cast<int64_t>(n), a.cols = x.cols();
        a.picks = picks, a.host = reinterpret_cast<int32_t*>(picks_host_.p);
        queue_.keep(x);
        return a;
    }

    // Runs the recorded launches: the staged bytes to the device in one copy, then each launch,
    // or the graph captured from an earlier queue with the same signature. Returns the device
    // copy of the staged bytes (valid until the next queue runs).
    // graphs false: eagerly whatever the signature (a queue that ends in a read-back mid-step).
    std::byte* flush(bool graphs = true) {
        if (queue_.empty()) return static_cast<std::byte*>(args_dev_.get());
        // Whatever happens below, these launches were the step's: a failed one is not run again
        // at the next flush.
        struct Clear {
            LaunchQueue& q;
            ~Clear() { q.clear(); }
        } clear{queue_};
        const std::span<const std::byte> staged = queue_.staged();
        // The pinned bytes are read by the previous queue's copy until that has run.
        if (in_flight_) check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        in_flight_ = false;
        args_host_.grow(staged.size());
        if (args_dev_cap_ < staged.size()) {
            const size_t grown = std::max(staged.size(), 2 * args_dev_cap_);
            args_dev_ = device_alloc(grown);
            args_dev_cap_ = grown;
        }
        if (!staged.empty()) std::memcpy(args_host_.p, staged.data(), staged.size());
        auto* dev = static_cast<std::byte*>(args_dev_.get());
        const LaunchEnv env{stream_, dev};
        // The copy's addresses belong to the work as much as the launches' bytes do. One buffer,
        // reused: a decode step's signature is tens of KB.
        std::string& sig = sig_;
        sig.assign(reinterpret_cast<const char*>(&args_host_.p), sizeof(void*));
        sig.append(reinterpret_cast<const char*>(&dev), sizeof dev);
        queue_.append_signature(sig);
        const GraphCache::Decision d = graphs ? graphs_.decide(sig) : GraphCache::Decision{};
        in_flight_ = true;
        if (d.action == GraphCache::Action::Replay)
            check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(d.graph), stream_),
                  "cudaGraphLaunch");
        else if (d.action != GraphCache::Action::Capture || !capture(sig, env, staged.size()))
            run_eager(env, staged.size());
        return dev;
    }
    // flush(), then wait for the stream: results are on the host, nothing runs.
    std::byte* finish(bool graphs = true) {
        std::byte* dev = flush(graphs);
        check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
        in_flight_ = false;
        return dev;
    }
    void run_eager(const LaunchEnv& env, size_t staged) {
        if (staged)
            check(cudaMemcpyAsync(env.args, args_host_.p, staged, cudaMemcpyHostToDevice, stream_),
                  "cudaMemcpyAsync (op arguments)");
        queue_.run(env);
    }
    // Captures the queue as a graph, keeps it and launches it; false (and the signature left to
    // run eagerly) where the capture or instantiation failed.
    bool capture(const std::string& sig, const LaunchEnv& env, size_t staged) {
        check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal),
              "cudaStreamBeginCapture");
        cudaGraph_t graph = nullptr;
        try {
            run_eager(env, staged);
        } catch (const std::exception&) {
            // A call the capture refused (nothing ran while capturing): end it, and run the queue
            // eagerly, now and from now on; a launch that is wrong in itself fails there.
            cudaStreamEndCapture(stream_, &graph);
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            graphs_.refuse(sig);
            return false;
        }
        cudaError_t e = cudaStreamEndCapture(stream_, &graph);
        cudaGraphExec_t exec = nullptr;
        if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
        if (graph) cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            cudaGetLastError();  // not sticky: the eager run goes on
            graphs_.refuse(sig);
            return false;
        }
        for (void* old : graphs_.store(sig, exec))
            cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(old));
        check(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
        return true;
    }

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
    LaunchQueue queue_;
    GraphCache graphs_;
    std::string sig_;   // the running queue's signature
    Pinned args_host_;  // the staged bytes, where the queue's first copy reads them
    std::shared_ptr<void> args_dev_;
    size_t args_dev_cap_ = 0;
    bool in_flight_ = false;  // a queue ran since the stream was last waited for
    Pinned picks_host_;
    std::vector<Arena> scratch_;
    Arena picks_;
    Arena split_;  // flash-decoding's partial results
    std::vector<std::byte> host_stage_;
    std::vector<float> angles_host_, mass_host_;
    std::vector<KvSlot> slots_host_;
    std::vector<int64_t> table_host_;
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
        return std::shared_ptr<Backend>(std::make_shared<CudaBackend>(0, threads, o.cuda_graphs));
    } catch (const std::exception& e) {
        return make_error(ErrorCode::Unavailable, "{}", e.what());
    }
}

}  // namespace ferry::kernels::cuda
