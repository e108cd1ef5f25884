// The narrow interface between the model and a device: the memory a forward pass needs
// (weights in the device's own layout, the KV pool, working buffers, copies to and from the
// host) and every operation the model is made of. The model is written once against it
// (model/llama.cpp names ops and tensors only); each backend implements it beside a scalar
// reference its fast paths are tested against: kernels/cpu/ today (thread pool, SIMD levels,
// packed weights), a GPU next (docs/architecture.md, "Adding a backend").
//
// Tensors handed to an op are on the backend's device, float32 and row-major ({n_tokens, dim})
// unless the op says otherwise. A backend runs one caller's ops at a time, in order, like a
// CUDA stream: the engine thread, or the one thread of a CLI command.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/sample_args.h"
#include "quant/kv_format.h"

namespace ferry {
class ThreadPool;
}

namespace ferry::kernels {

// What quantized weights (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K/int4) meet their activations as
// (docs/performance.md says why the default is Int16):
//  - F32: float activations against weights widened to floats (exact float32 math);
//  - Int16: each block of 32 activations rounded to a 16-bit grid (amax / 16256 steps), in
//    integer dot products;
//  - Int8: the same with an 8-bit grid (amax / 127, llama.cpp's Q8 activations): fastest, and
//    coarse enough to move this model's logits by ~1.
// Other weight types ignore it. FERRY_ACTIVATIONS=f32|int16|int8 sets the default.
enum class Activations { F32, Int16, Int8 };
const char* activations_name(Activations a);
// "f32", "int16" or "int8"; false for anything else.
bool parse_activations(const char* name, Activations* out);

enum class RopeStyle { Normal, Neox };  // adjacent pairs vs. halves (GPT-NeoX)

// A weight matrix of rows output channels, each a row of cols inputs, resident on a backend.
struct Matrix {
    Tensor data;    // {rows, cols} in the file's row format, readable by the backend
    Tensor layout;  // the same matrix in the backend's own layout, where it made one (opaque)
    DType type() const { return data.dtype(); }
    int64_t rows() const { return data.rows(); }
    int64_t cols() const { return data.cols(); }
};

// How a matrix will be read, so a backend can lay it out for that: multiplied (every row,
// every step), or looked up a row at a time (the token embedding).
enum class MatrixUse { Matmul, Rows };
struct MatrixSource {
    Tensor host;  // {rows, cols} as the file holds it, on the host
    MatrixUse use = MatrixUse::Matmul;
};

// One output of a multiplication: y = x W^T, y {n_tokens, w.rows()}.
struct MatmulOut {
    const Matrix* w;
    Tensor y;
};

// One sequence's share of a ragged batch: n_tokens consecutive tokens of the batch from
// first_token on, at positions start_pos.., whose keys and values go into (and whose attention
// reads from) `blocks`, the sequence's block table in position order.
struct BatchSeq {
    int64_t start_pos = 0;
    int32_t n_tokens = 0;
    int32_t first_token = 0;
    std::span<const int32_t> blocks;
    // Added to each token's position for its rotation only (rope_angles): a sequence whose
    // oldest cache blocks were evicted (engine/kv_eviction.h) keeps its tokens' own positions
    // for RoPE while their slots in the cache, which `positions` index, moved down.
    int64_t rope_offset = 0;
    // Host memory of n_tokens x n_head x blocks.size() floats, or null: attention adds each of
    // the sequence's tokens' softmax weights to it, per query head and block, every layer (the
    // attention mass H2O eviction ranks blocks by).
    float* attn_mass = nullptr;
    // A hybrid cache's (KvCacheView::window_layer) sliding-window layers' own table, in the
    // same position order; empty otherwise.
    std::span<const int32_t> window_blocks = {};
    // Empty, or a tree of draft tokens verified in one pass (engine/speculation.h): per token,
    // the mask of the chunk's tokens it sees (bit i: the chunk's token i; its ancestors and
    // itself, token 0 the root). The chunk's tokens still take slots start_pos, start_pos + 1,
    // ... in the cache, but each rotates by start_pos + its depth (rope_position), and sees
    // the cache before start_pos and, of the chunk, only its own branch.
    std::span<const uint64_t> tree = {};
};
inline constexpr int kMaxTreeTokens = 64;  // BatchSeq::tree's masks: one bit a token
// Whether masks can be a BatchSeq::tree for n tokens: one per token, at most kMaxTreeTokens,
// each token seeing the root and itself and no token after itself.
inline bool valid_tree_masks(std::span<const uint64_t> masks, size_t n) {
    if (masks.size() != n || n > static_cast<size_t>(kMaxTreeTokens)) return false;
    for (size_t i = 0; i < n; ++i) {
        const uint64_t own = uint64_t{1} << i;
        const uint64_t later = i + 1 < 64 ? ~((own << 1) - 1) : 0;
        if (!(masks[i] & own) || !(masks[i] & 1) || (masks[i] & later)) return false;
    }
    return true;
}

// A ragged batch as one forward pass runs it; host arrays that the model runner packed.
struct Batch {
    std::span<const int32_t> tokens;     // every sequence's chunk, back to back
    std::span<const int64_t> positions;  // per token
    std::span<const int32_t> token_seq;  // per token: its sequence, an index into seqs
    std::span<const BatchSeq> seqs;
    std::span<const int32_t> logit_tokens;  // tokens whose logits are wanted, in output order
    int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
    // The position token t's rotation (and a sliding window) counts from: its slot plus its
    // sequence's rope_offset, or in a tree, its sequence's start_pos plus the token's depth.
    int64_t rope_position(int64_t t) const {
        const BatchSeq& s = seqs[static_cast<size_t>(token_seq[t])];
        if (s.tree.empty()) return positions[t] + s.rope_offset;
        const int depth = std::popcount(s.tree[static_cast<size_t>(t - s.first_token)]) - 1;
        return s.start_pos + depth + s.rope_offset;
    }
};

// Where a KV cache is and how its blocks are laid out (kv::KvStore::view()): for keys and for
// values, n_layer x n_blocks regions of k_region / v_region bytes, [layer][block], each laid out
// as quant/kv_format.h says.
// A hybrid cache (Gemma 3: a few global layers among sliding-window ones) gives its sliding
// layers a pool of their own, sized for windows rather than whole contexts: layer l's block 0
// is region layer_region[l], and a layer with window_layer[l] set is indexed by each
// sequence's window_blocks instead of its blocks.
struct KvCacheView {
    std::byte* k = nullptr;
    std::byte* v = nullptr;
    int n_layer = 0;
    int64_t n_blocks = 0;
    int block_size = 0;
    int kv_dim = 0;  // KV heads x head_dim
    int head_dim = 0;
    quant::KvDType dtype = quant::KvDType::F32;
    size_t k_region = 0, v_region = 0;
    quant::KvBlockLayout layout{};
    // int8 keys: n_layer x kv_dim in the backend's memory (the device's), else null
    const float* k_channel_scales = nullptr;
    std::atomic<int64_t>* k_clipped = nullptr;  // int8 key elements clipped so far (host)
    // The same count for a device backend, one int64 in its memory that its kernels add to
    // atomically (the host's std::atomic is out of their reach); null: none
    int64_t* k_clipped_device = nullptr;
    const int64_t* layer_region = nullptr;  // per layer, or null: layer x n_blocks
    const uint8_t* window_layer = nullptr;  // per layer, or null: none has its own table
    size_t region(int layer, int64_t block) const {
        const int64_t first =
            layer_region ? layer_region[layer] : static_cast<int64_t>(layer) * n_blocks;
        return static_cast<size_t>(first + block);
    }
    std::byte* k_block(int layer, int64_t block) const {
        return k + region(layer, block) * k_region;
    }
    std::byte* v_block(int layer, int64_t block) const {
        return v + region(layer, block) * v_region;
    }
    // The block table a layer reads a sequence's keys and values through.
    std::span<const int32_t> table(const BatchSeq& s, int layer) const {
        return window_layer && window_layer[layer] ? s.window_blocks : s.blocks;
    }
};

struct AttentionShape {
    int n_head = 0;
    int n_head_kv = 0;
    int head_dim = 0;
    float scale = 1;  // applied to q.k
    int window = 0;   // > 0: a token at pos attends (pos - window, pos] only (sliding window)
};

class Backend {
  public:
    virtual ~Backend() = default;

    virtual Device device() const = 0;
    // How it runs, for reports and JSON: {"backend", "cpu"}, {"cpu_level", "avx512"}, ...
    virtual std::vector<std::pair<std::string, std::string>> describe() const = 0;
    virtual Activations activations() const = 0;
    // Whether kv_write and attention handle a cache of type t; an error says what they handle
    // (kv::KvStore refuses the rest when it is made, before any step runs).
    virtual Status kv_support(quant::KvDType) const { return Status::Ok(); }

    // ---- memory -------------------------------------------------------------------------
    // Zero-filled device memory, resident now (not on first touch), owned by the tensor.
    virtual Tensor alloc(DType type, std::span<const int64_t> shape) = 0;
    virtual void upload(const void* host, const Tensor& dst) = 0;  // dst.bytes() bytes
    virtual void download(const Tensor& src, void* host) = 0;      // src.bytes() bytes
    struct Copy {
        const std::byte* src;
        std::byte* dst;
        size_t bytes;
    };
    virtual void copy(std::span<const Copy> copies) = 0;  // device to device
    // Working memory of a forward pass: slot i keeps the largest size asked of it, and what is
    // in it is undefined until written.
    virtual Tensor scratch(int slot, DType type, std::initializer_list<int64_t> shape) = 0;
    // t as host memory: t itself where the device's memory is the host's, else a copy (valid
    // until the next call).
    virtual Tensor host_view(const Tensor& t) = 0;

    // ---- weights ------------------------------------------------------------------------
    // The matrices made resident in the device's own layout, in order; progress(done, total)
    // in bytes.
    virtual std::vector<Matrix> make_resident(
        std::span<const MatrixSource> sources,
        const std::function<void(int64_t, int64_t)>& progress = nullptr) = 0;
    // A float vector (norm weights, biases) on the device.
    virtual Tensor resident_vector(const Tensor& host) = 0;
    // Bytes one multiplication by w streams (its layout's, where it reads that).
    virtual size_t bytes_read(const Matrix& w) const = 0;

    // ---- ops ----------------------------------------------------------------------------
    // out[t] = row tokens[t] of the table, as floats.
    virtual void embed(const Matrix& table, const Batch& b, const Tensor& out) = 0;
    // out[t] = x[t] / rms(x[t]) * weight, row by row.
    virtual void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;
    // Several products of the same x (q/k/v, gate/up) in one pass, so a decode step pays one
    // synchronisation for the group. Every w has x.cols() columns.
    virtual void matmul(std::span<const MatmulOut> outs, const Tensor& x) = 0;
    virtual void add(const Tensor& x, const Tensor& y) = 0;           // x += y (the residual)
    virtual void add_bias(const Tensor& y, const Tensor& bias) = 0;   // every row += bias
    virtual void silu_mul(const Tensor& gate, const Tensor& up) = 0;  // gate = silu(gate) * up
    // gate = gelu(gate) * up, GELU's tanh approximation (Gemma's GeGLU; transformers'
    // gelu_pytorch_tanh).
    virtual void gelu_mul(const Tensor& gate, const Tensor& up) = 0;
    virtual void scale(const Tensor& x, float s) = 0;  // x *= s (Gemma's embedding scale)
    // x = cap * tanh(x / cap), every element (Gemma's logit soft-capping)
    virtual void softcap(const Tensor& x, float cap) = 0;
    // cos_sin[t] = the rotation of token t's position (plus its sequence's rope_offset):
    // inv_freq.size() (cos, sin) pairs, pair i at angle pos * inv_freq[i] (the model's frequencies,
    // its rope scaling applied), both multiplied by `scale` (YaRN's attention factor; 1 otherwise).
    virtual void rope_angles(const Batch& b, std::span<const double> inv_freq, float scale,
                             const Tensor& cos_sin) = 0;
    // Rotates the first rope_dim dims of each of n_heads vectors of head_dim in every row of x.
    virtual void rope(const Tensor& x, int n_heads, int head_dim, int rope_dim,
                      const Tensor& cos_sin, RopeStyle style) = 0;
    // Turns every stored key of one block of one layer (each slot, each KV head) by one
    // rotation, rope_dim / 2 host (cos, sin) pairs, as rope turns a row: what moving those keys
    // to other positions does under RoPE (KV eviction moves its attention sinks up to the
    // window). Keys stored as f32, f16 or fp8; int8 keys (per-channel scales) are refused.
    virtual void kv_rotate_keys(const KvCacheView& kv, int layer, int32_t block, int rope_dim,
                                std::span<const float> cos_sin, RopeStyle style) = 0;
    // Stores every token's keys and values (rows of kv_dim) in its sequence's block and slot,
    // as the cache's element type.
    virtual void kv_write(const KvCacheView& kv, int layer, const Batch& b, const Tensor& k,
                          const Tensor& v) = 0;
    // Copies the keys and values (and their per-token scales) of slot `from` to slot `to` of
    // the sequence's table, every layer, for each pair in order: a verified draft tree's
    // accepted branch moving down to the slots its positions own.
    virtual void kv_move_slots(const KvCacheView& kv, const BatchSeq& s,
                               std::span<const std::pair<int64_t, int64_t>> moves) = 0;
    // Causal attention: token t attends to positions [0, positions[t]] of its sequence with
    // each of its query heads (a tree's token to its branch among those, BatchSeq::tree);
    // every token's keys and values must be in the cache already.
    virtual void attention(const KvCacheView& kv, int layer, const Batch& b,
                           const AttentionShape& shape, const Tensor& q, const Tensor& out) = 0;
    virtual void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) = 0;
    // x[rows[i]] += weights[i] * y[i] for each row i of y, in order (a mixture's experts adding
    // their tokens' outputs back into the residual); rows and weights on the host.
    virtual void add_rows_scaled(const Tensor& x, std::span<const int32_t> rows,
                                 std::span<const float> weights, const Tensor& y) = 0;
    virtual void softmax(const Tensor& x) = 0;                              // every row
    virtual void argmax(const Tensor& x, std::span<int32_t> host_out) = 0;  // every row's
    // Row i's token drawn as rows[i] asks (sample_row.h: engine::Sampler's draw), its edits a
    // slice of `edits` and its allowed tokens (if it has a mask) words of `masks`; -1 where the
    // mask allows nothing. The rows' logits are left edited (biases, penalties, the mask).
    virtual void sample(const Tensor& logits, std::span<const SampleRow> rows,
                        std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                        std::span<int32_t> host_out) = 0;

    // Returns once every op called so far has run. The CPU runs an op when it is called; a
    // device backend may hold its launches until a result is read (kernels/cuda/launch_queue.h),
    // and the model runner calls this at the end of every step, so nothing of a step is left
    // pending when its blocks are freed or its time is taken.
    virtual void synchronize() {}

    // ---- the host side ------------------------------------------------------------------
    // Threads for host work between steps (sampling): the CPU backend's own pool, which is
    // idle then.
    virtual ThreadPool& host_pool() = 0;
    // The roofline's ceilings, measured (under a second each): GB/s reading memory far larger
    // than the caches, and f32 GFLOP/s (an FMA counts 2); and the device's memory.
    virtual double measure_read_bandwidth_gbs() = 0;
    virtual double measure_peak_gflops_f32() = 0;
    virtual uint64_t memory_bytes() const = 0;
    // What could still be allocated now (MemAvailable on the CPU, the device's free memory on a
    // GPU; 0: unknown): what a KV pool sized from free memory divides.
    virtual uint64_t memory_free_bytes() const = 0;
};

// One value of describe() ("" when the backend does not report it).
std::string backend_property(const Backend& b, std::string_view key);

// Backend::sample's arguments, checked alike on every backend: a row of logits and an output
// for each SampleRow, each row's edits inside `edits` and its mask inside `masks`. Throws
// std::invalid_argument.
void check_sample_args(const Tensor& logits, std::span<const SampleRow> rows,
                       std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                       std::span<const int32_t> host_out);

struct BackendOptions {
    Device device = Device::CPU;
    int threads = 0;                         // CPU: workers incl. the caller; 0: physical cores
    std::optional<Activations> activations;  // unset: FERRY_ACTIVATIONS, else int16
    // CUDA: a step's launches replayed as a graph captured from an earlier step with the same
    // launches (kernels/cuda/graph_cache.h); false runs every launch eagerly.
    bool cuda_graphs = true;
};

// A backend for the options' device; an error names what is missing (no such device, a
// build without it).
Expected<std::shared_ptr<Backend>> make_backend(const BackendOptions& options = {});

}  // namespace ferry::kernels
