// The CPU backend: host memory (huge pages for weights and the KV pool), a persistent thread
// pool that every op's parallel loop runs on, the SIMD level dispatch.h chose, and the packed
// layout the integer matmuls read (packed_weights.h). Nothing outside kernels/cpu/ sees any
// of them: the model names ops on kernels::Backend.
#pragma once

#include <vector>

#include "core/thread_pool.h"
#include "kernels/backend.h"

namespace ferry::kernels::cpu {

class CpuBackend final : public Backend {
  public:
    // threads: the pool's, the calling thread included (0: physical cores).
    CpuBackend(int threads, Activations act);

    Device device() const override { return Device::CPU; }
    std::vector<std::pair<std::string, std::string>> describe() const override;
    Activations activations() const override { return act_; }

    Tensor alloc(DType type, std::span<const int64_t> shape) override;
    void upload(const void* host, const Tensor& dst) override;
    void download(const Tensor& src, void* host) override;
    void copy(std::span<const Copy> copies) override;
    Tensor scratch(int slot, DType type, std::initializer_list<int64_t> shape) override;
    Tensor host_view(const Tensor& t) override { return t; }

    std::vector<Matrix> make_resident(
        std::span<const MatrixSource> sources,
        const std::function<void(int64_t, int64_t)>& progress) override;
    Tensor resident_vector(const Tensor& host) override;
    size_t bytes_read(const Matrix& w) const override;

    void embed(const Matrix& table, const Batch& b, const Tensor& out) override;
    void rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override;
    void matmul(std::span<const kernels::MatmulOut> outs, const Tensor& x) override;
    void add(const Tensor& x, const Tensor& y) override;
    void add_bias(const Tensor& y, const Tensor& bias) override;
    void silu_mul(const Tensor& gate, const Tensor& up) override;
    void gelu_mul(const Tensor& gate, const Tensor& up) override;
    void scale(const Tensor& x, float s) override;
    void softcap(const Tensor& x, float cap) override;
    void rope_angles(const Batch& b, std::span<const double> inv_freq, float scale,
                     const Tensor& cos_sin) override;
    void rope(const Tensor& x, int n_heads, int head_dim, int rope_dim, const Tensor& cos_sin,
              RopeStyle style) override;
    void kv_rotate_keys(const KvCacheView& kv, int layer, int32_t block, int rope_dim,
                        std::span<const float> cos_sin, RopeStyle style) override;
    void kv_write(const KvCacheView& kv, int layer, const Batch& b, const Tensor& k,
                  const Tensor& v) override;
    void kv_move_slots(const KvCacheView& kv, const BatchSeq& s,
                       std::span<const std::pair<int64_t, int64_t>> moves) override;
    void attention(const KvCacheView& kv, int layer, const Batch& b, const AttentionShape& shape,
                   const Tensor& q, const Tensor& out) override;
    void gather_rows(const Tensor& x, std::span<const int32_t> rows, const Tensor& out) override;
    void add_rows_scaled(const Tensor& x, std::span<const int32_t> rows,
                         std::span<const float> weights, const Tensor& y) override;
    void softmax(const Tensor& x) override;
    void argmax(const Tensor& x, std::span<int32_t> host_out) override;
    void sample(const Tensor& logits, std::span<const SampleRow> rows,
                std::span<const LogitEdit> edits, std::span<const uint64_t> masks,
                std::span<int32_t> host_out) override;

    ThreadPool& host_pool() override { return pool_; }
    double measure_read_bandwidth_gbs() override;
    double measure_peak_gflops_f32() override;
    uint64_t memory_bytes() const override;
    uint64_t memory_free_bytes() const override;

  private:
    // fn(row) for every row of a batch: over the pool once there is enough of it (with 64
    // sequences decoding, a serial share held the other core idle), inline for a few.
    template <class Fn>
    void per_row(int64_t n, Fn&& fn);

    ThreadPool pool_;
    Activations act_;
    std::vector<std::vector<float>> scratch_;
    // Per sequence, the addresses of its blocks in the layer being attended.
    std::vector<const void*> block_k_, block_v_;
};

}  // namespace ferry::kernels::cpu
