#include "kv/kv_store.h"

#include <algorithm>

namespace ferry::kv {

KvStore::KvStore(int n_layer, int64_t n_blocks, int block_size, int kv_dim)
    : n_layer_(n_layer),
      n_blocks_(n_blocks),
      block_size_(block_size),
      kv_dim_(kv_dim),
      k_(new float[static_cast<size_t>(n_layer) * n_blocks * block_size * kv_dim]),
      v_(new float[static_cast<size_t>(n_layer) * n_blocks * block_size * kv_dim]) {
    // Touch the whole pool now: a reservation that only becomes resident when traffic comes
    // would make memory use look smaller than it is (and `ferry plan` disagree with it), and
    // would move page faults onto the first requests.
    const size_t n = static_cast<size_t>(n_layer) * n_blocks * block_size * kv_dim;
    std::fill_n(k_.get(), n, 0.0f);
    std::fill_n(v_.get(), n, 0.0f);
}

void KvStore::copy_block(int64_t src, int64_t dst) {
    const size_t n = static_cast<size_t>(block_size_) * kv_dim_;
    for (int l = 0; l < n_layer_; ++l) {
        std::copy_n(k(l, src), n, k(l, dst));
        std::copy_n(v(l, src), n, v(l, dst));
    }
}

}  // namespace ferry::kv
