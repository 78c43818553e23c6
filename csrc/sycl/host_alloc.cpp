// Caching host allocator for the SYCL backend's CPU tensors (host_alloc.h).
#include "sycl/host_alloc.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace xkernels::sycl_backend {
namespace {

constexpr size_t kMinBytes = size_t{1} << 20;  // smaller requests: torch's default CPU allocator
constexpr size_t kGranule = size_t{2} << 20;   // size rounding and alignment: one huge page
constexpr size_t kDefaultLimitMb = 512;

size_t limit_from_env() {
  const char* v = std::getenv("XKERNELS_HOST_CACHE_MB");
  if (v == nullptr || *v == '\0') return kDefaultLimitMb << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(v, &end, 10);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && mb >= 0,
                    "xkernels: environment variable XKERNELS_HOST_CACHE_MB must be a whole number of MiB >= 0, got '",
                    v, "'");
  return static_cast<size_t>(mb) << 20;
}

struct Block {
  void* ptr;
  size_t size;
};

class Pool {
 public:
  Pool() : limit_(limit_from_env()) {}

  // A cached block of `size` (or up to 25 % larger), or nullptr. Of several blocks of the size found, the one
  // released last (equal keys keep their insertion order): the likeliest to be still in the caches and the TLB.
  void* take(size_t size, size_t* got) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.lower_bound(size);
    if (it == free_.end() || it->first > size + size / 4) {
      ++misses_;
      return nullptr;
    }
    it = std::prev(free_.upper_bound(it->first));
    ++hits_;
    *got = it->first;
    void* p = it->second.ptr;
    cached_ -= it->first;
    in_use_ += it->first;
    free_.erase(it);
    return p;
  }
  void note_new(size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ += size;
  }
  // Keeps the released block, evicting the least recently released ones if the bound needs it: the sizes a
  // program uses now are the ones it will ask for next (a bound that dropped the newest blocks instead kept
  // an earlier phase's sizes forever and made every later allocation a fresh, page-faulting one).
  void give(void* p, size_t size) {
    std::vector<void*> evicted;
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      in_use_ -= size;
      if (size <= limit_) {
        while (cached_ + size > limit_) {
          auto oldest = free_.begin();
          for (auto it = free_.begin(); it != free_.end(); ++it)
            if (it->second.stamp < oldest->second.stamp) oldest = it;
          evicted.push_back(oldest->second.ptr);
          cached_ -= oldest->first;
          free_.erase(oldest);
        }
        free_.emplace(size, Entry{p, ++clock_});
        cached_ += size;
        keep = true;
      }
    }
    for (void* e : evicted) std::free(e);
    if (!keep) std::free(p);
  }
  void clear() {
    std::multimap<size_t, Entry> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(free_);
      cached_ = 0;
    }
    for (auto& [size, e] : drop) std::free(e.ptr);
  }
  HostCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    HostCacheStats s;
    s.limit_bytes = limit_;
    s.cached_bytes = cached_;
    s.cached_blocks = free_.size();
    s.in_use_bytes = in_use_;
    s.hits = hits_;
    s.misses = misses_;
    return s;
  }
  size_t limit() const { return limit_; }

 private:
  struct Entry {
    void* ptr;
    uint64_t stamp;  // release order, for eviction
  };
  std::mutex mu_;
  const size_t limit_;
  std::multimap<size_t, Entry> free_;
  size_t cached_ = 0, in_use_ = 0, hits_ = 0, misses_ = 0;
  uint64_t clock_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // leaked: tensors may be released after static destructors ran
  return *p;
}

void release(void* ctx) {
  if (defer_host_release(&release, ctx)) return;
  auto* b = static_cast<Block*>(ctx);
  drain_host_work();  // no queued kernel may still use the block (host_alloc.h)
  note_host_release();
  pool().give(b->ptr, b->size);
  delete b;
}

// A block of torch's CPU allocator (small requests, or caching off), released through drain_host_work.
struct TorchBlock {
  c10::DataPtr inner;
};
void release_torch_block(void* ctx) {
  if (defer_host_release(&release_torch_block, ctx)) return;
  drain_host_work();
  delete static_cast<TorchBlock*>(ctx);
}

class CachingHostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n < kMinBytes || pool().limit() == 0) {
      c10::DataPtr d = c10::GetCPUAllocator()->allocate(n);
      if (n == 0) return d;  // nothing a kernel could write
      void* data = d.get();
      return {data, new TorchBlock{std::move(d)}, &release_torch_block, c10::Device(c10::kCPU)};
    }
    const size_t want = (n + kGranule - 1) / kGranule * kGranule;
    size_t size = want;
    void* p = pool().take(want, &size);
    if (p == nullptr) {
      p = std::aligned_alloc(kGranule, want);
      if (p == nullptr) {  // give the cache back and try once more before failing
        pool().clear();
        p = std::aligned_alloc(kGranule, want);
      }
      TORCH_CHECK(p != nullptr, "xkernels: out of host memory allocating ", want, " bytes");
#ifdef MADV_HUGEPAGE
      (void)madvise(p, want, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
      pool().note_new(want);
      size = want;
    }
    return {p, new Block{p, size}, &release, c10::Device(c10::kCPU)};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
};

}  // namespace

c10::Allocator* caching_host_allocator() {
  static CachingHostAllocator* a = new CachingHostAllocator();
  return a;
}

at::Tensor empty(at::IntArrayRef sizes, const at::TensorOptions& opts) {
  if (!opts.device().is_cpu() || opts.pinned_memory()) return at::empty(sizes, opts);
  return at::detail::empty_generic(sizes, caching_host_allocator(), c10::DispatchKeySet(c10::DispatchKey::CPU),
                                   c10::typeMetaToScalarType(opts.dtype()), opts.memory_format_opt());
}

HostCacheStats host_cache_stats() { return pool().stats(); }
void host_cache_clear() { pool().clear(); }

}  // namespace xkernels::sycl_backend
