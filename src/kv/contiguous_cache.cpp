#include "kv/contiguous_cache.h"

namespace ferry::kv {

ContiguousCache::ContiguousCache(int n_layer, int64_t n_ctx, int kv_dim)
    : n_layer_(n_layer),
      n_ctx_(n_ctx),
      kv_dim_(kv_dim),
      k_(new float[static_cast<size_t>(n_layer) * n_ctx * kv_dim]),
      v_(new float[static_cast<size_t>(n_layer) * n_ctx * kv_dim]) {}

}  // namespace ferry::kv
