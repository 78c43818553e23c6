// Integrity of the SYCL runtime's persistent kernel cache (runtime_internal.h, CacheSession).
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <c10/util/Exception.h>

#include "sycl/runtime_info.h"
#include "sycl/runtime_internal.h"

namespace xkernels::sycl_backend {

// The SYCL runtime's on-disk cache (SYCL_CACHE_PERSISTENT=1, SYCL_CACHE_DIR) has no integrity
// check of its own. Measured with 2026.1.2: a truncated or garbage entry makes it recompile
// in every later process without ever rewriting the entry (the cache silently stops working
// for it), and a few flipped bytes in a cached device binary crash the process (SIGSEGV) in
// every later process. So we keep a manifest of the files the runtime writes during our
// builds (size + FNV-1a hash) next to them, and before the first build of each process verify
// it: an entry whose file changed, or a zero-length binary, is removed (its directory) and
// simply recompiled. Builds and verification hold an exclusive lock file, so concurrent
// xkernels processes never see each other's half-written entries.
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "xkernels-manifest.txt";
constexpr const char* kLockName = "xkernels.lock";

std::string persistent_cache_dir() {
  const char* on = std::getenv("SYCL_CACHE_PERSISTENT");
  const char* dir = std::getenv("SYCL_CACHE_DIR");
  if (!on || std::string(on) != "1" || !dir || !*dir) return "";
  return dir;
}

bool is_bookkeeping(const fs::path& p) {
  const std::string n = p.filename().string();
  auto ends_with = [&](const std::string& s) {
    return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
  };
  return n == kManifestName || n == kLockName || ends_with("_access_time.txt") || ends_with(".lock") ||
         ends_with(".tmp");
}

uint64_t fnv1a_file(const fs::path& p, bool* ok) {
  std::FILE* f = std::fopen(p.c_str(), "rb");
  *ok = f != nullptr;
  uint64_t h = 1469598103934665603ull;
  if (!f) return h;
  unsigned char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < n; ++i) h = (h ^ buf[i]) * 1099511628211ull;
  std::fclose(f);
  return h;
}

struct FileStamp {
  uintmax_t size = 0;
  int64_t mtime = 0;
};

// Every cache file (relative path -> size, mtime), bookkeeping files excluded.
std::unordered_map<std::string, FileStamp> scan_cache(const fs::path& root) {
  std::unordered_map<std::string, FileStamp> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec) || is_bookkeeping(it->path())) continue;
    FileStamp s;
    s.size = it->file_size(ec);
    s.mtime = static_cast<int64_t>(it->last_write_time(ec).time_since_epoch().count());
    out[fs::relative(it->path(), root, ec).string()] = s;
  }
  return out;
}

struct ManifestEntry {
  uint64_t hash = 0;
  uintmax_t size = 0;
};
using Manifest = std::unordered_map<std::string, ManifestEntry>;

Manifest read_manifest(const fs::path& root) {
  Manifest m;
  std::FILE* f = std::fopen((root / kManifestName).c_str(), "r");
  if (!f) return m;
  char path[4096];
  unsigned long long hash, size;
  while (std::fscanf(f, "%llx %llu %4095[^\n]\n", &hash, &size, path) == 3) m[path] = {hash, size};
  std::fclose(f);
  return m;
}

void write_manifest(const fs::path& root, const Manifest& m) {
  const fs::path tmp = root / (std::string(kManifestName) + ".tmp");
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return;  // read-only cache: nothing to keep
  for (const auto& [path, e] : m)
    std::fprintf(f, "%016llx %llu %s\n", static_cast<unsigned long long>(e.hash),
                 static_cast<unsigned long long>(e.size), path.c_str());
  const bool ok = std::fclose(f) == 0;
  std::error_code ec;
  if (ok) fs::rename(tmp, root / kManifestName, ec);
}

// Exclusive inter-process lock on <cache>/xkernels.lock (no-op if it cannot be created).
struct CacheLock {
  int fd = -1;
  explicit CacheLock(const fs::path& root) {
    std::error_code ec;
    fs::create_directories(root, ec);
    fd = ::open((root / kLockName).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0)
      while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {}
  }
  ~CacheLock() {
    if (fd >= 0) ::close(fd);  // releases the lock
  }
  CacheLock(const CacheLock&) = delete;
  CacheLock& operator=(const CacheLock&) = delete;
};

std::mutex g_cache_mu;  // serialises this process's builds (with the file lock, across processes)
bool g_cache_verified = false;
std::vector<std::string> g_cache_purged;  // what verification removed (for tests / diagnostics)

// Under the lock: checks the manifest's files, removes corrupted entries. Once per process.
void verify_cache(const fs::path& root) {
  if (g_cache_verified) return;
  g_cache_verified = true;
  Manifest m = read_manifest(root);
  const size_t recorded = m.size();
  std::vector<fs::path> bad_dirs;
  std::error_code ec;
  for (auto it = m.begin(); it != m.end();) {
    const fs::path p = root / it->first;
    bool ok = fs::exists(p, ec);
    if (!ok) {  // evicted by the runtime: forget it
      it = m.erase(it);
      continue;
    }
    bool readable;
    const uintmax_t size = fs::file_size(p, ec);
    if (size != it->second.size || fnv1a_file(p, &readable) != it->second.hash || !readable) {
      bad_dirs.push_back(p.parent_path());
      it = m.erase(it);
      continue;
    }
    ++it;
  }
  // Files we did not record (written by a process that died mid-build, or before this
  // manifest existed): an empty binary or source is certainly broken.
  for (const auto& [rel, stamp] : scan_cache(root)) {
    if (m.count(rel) || stamp.size != 0) continue;
    const fs::path p = root / rel;
    if (p.extension() == ".bin" || p.extension() == ".src") bad_dirs.push_back(p.parent_path());
  }
  for (const auto& d : bad_dirs) {
    if (d == root || !fs::exists(d, ec)) continue;
    const std::string prefix = fs::relative(d, root, ec).string() + "/";
    for (auto it = m.begin(); it != m.end();) it = it->first.rfind(prefix, 0) == 0 ? m.erase(it) : std::next(it);
    fs::remove_all(d, ec);
    g_cache_purged.push_back(d.string());
    TORCH_WARN("xkernels: removed a corrupted entry of the SYCL kernel cache (", d.string(),
               "); its kernels are compiled again");
  }
  if (m.size() != recorded) write_manifest(root, m);
}

}  // namespace

struct CacheSession::State {
  fs::path root;
  std::lock_guard<std::mutex> lock;
  std::unique_ptr<CacheLock> file_lock;
  std::unordered_map<std::string, FileStamp> before;
  State() : root(persistent_cache_dir()), lock(g_cache_mu) {}
};

CacheSession::CacheSession() : state_(std::make_unique<State>()) {
  State& s = *state_;
  if (s.root.empty()) return;
  s.file_lock = std::make_unique<CacheLock>(s.root);
  verify_cache(s.root);
  s.before = scan_cache(s.root);
}

CacheSession::~CacheSession() {
  State& s = *state_;
  if (s.root.empty()) return;
  try {
    Manifest m = read_manifest(s.root);
    bool changed = false;
    for (const auto& [rel, stamp] : scan_cache(s.root)) {
      auto b = s.before.find(rel);
      if (b != s.before.end() && b->second.size == stamp.size && b->second.mtime == stamp.mtime) continue;
      bool readable;
      const uint64_t h = fnv1a_file(s.root / rel, &readable);
      if (!readable) continue;
      m[rel] = {h, stamp.size};
      changed = true;
    }
    if (changed) write_manifest(s.root, m);
  } catch (const std::exception&) {
    // Bookkeeping only: a failure here must not fail the build.
  }
}

bool CacheSession::wrote_new_ir() const {
  const State& s = *state_;
  if (s.root.empty()) return false;
  for (const auto& [rel, stamp] : scan_cache(s.root))
    if (rel.rfind("ext_kernel_compiler/", 0) == 0 && !s.before.count(rel)) return true;
  return false;
}

std::vector<std::string> cache_purged() {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return g_cache_purged;
}

}  // namespace xkernels::sycl_backend
