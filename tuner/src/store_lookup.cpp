// Winner lookup over the user and system databases, as the runtime does it.
#include <filesystem>
#include <mutex>

#include "sage/common/strings.h"
#include "store_impl.h"

namespace fs = std::filesystem;

namespace sage::tuner {

struct WinnerLookup::Impl {
  LookupOptions opts;
  std::unique_ptr<Store> user, system;  // each serializes its own calls
  std::mutex mu;                        // guards warnings
  std::vector<std::string> warnings;

  void warn(const std::string& msg) {
    {
      std::lock_guard lk(mu);
      warnings.push_back(msg);
    }
    emit_warning(opts.warn, msg);
  }
};

WinnerLookup::WinnerLookup(LookupOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(opts);
  auto& o = impl_->opts;
  std::string user_path = o.user_db.empty() ? default_user_db_path() : o.user_db;
  // A lookup never creates the user DB: no file simply means nothing tuned yet.
  if (fs::exists(user_path)) {
    OpenOptions uo;
    uo.create = false;
    uo.quick_check = o.quick_check;
    uo.on_corrupt = OnCorrupt::rebuild;
    uo.warn = o.warn;
    try {
      impl_->user = std::make_unique<Store>(user_path, uo);
    } catch (const Error& e) {
      if (e.code() == Errc::io_error) {
        // Typically a database we may read but not write (another user's, a read-only
        // mount): serve from it without quarantining.
        try {
          uo.read_only = true;
          impl_->user = std::make_unique<Store>(user_path, uo);
          impl_->warn("user database " + user_path + " opened read-only: " + e.message());
        } catch (const Error& e2) {
          impl_->warn("user database ignored: " + std::string(e2.what()));
        }
      } else {
        impl_->warn("user database ignored: " + std::string(e.what()));
      }
    }
  }
  if (o.use_system) {
    std::string sys_path = o.system_db.empty() ? default_system_db_path() : o.system_db;
    if (fs::exists(sys_path)) {
      OpenOptions so;
      so.read_only = true;
      so.immutable = true;
      so.quick_check = o.quick_check;
      so.on_corrupt = OnCorrupt::fail;
      try {
        impl_->system = std::make_unique<Store>(sys_path, so);
      } catch (const Error& e) {
        impl_->warn("system database ignored: " + std::string(e.what()));
      }
    }
  }
}

WinnerLookup::~WinnerLookup() = default;

Store* WinnerLookup::user() { return impl_->user.get(); }
Store* WinnerLookup::system() { return impl_->system.get(); }
const std::vector<std::string>& WinnerLookup::warnings() const { return impl_->warnings; }

LookupResult WinnerLookup::find(const WinnerKey& key, bool explain_miss) {
  LookupResult r;
  Store* stores[2] = {impl_->user.get(), impl_->system.get()};
  Store* from = nullptr;
  for (Store* s : stores) {
    if (!s) continue;
    try {
      if (auto w = s->winner(key)) {
        r.winner = std::move(w);
        from = s;
        break;
      }
    } catch (const Error& e) {
      impl_->warn("winner lookup failed in " + s->path() + ": " + e.what());
    }
  }
  std::string what = cat(key.problem.str(), " on ", key.device.key(), " (nvrtc ", key.nvrtc_version,
                         ", generator ", key.generator_hash.substr(0, 12), ")");
  if (!r.winner) {
    r.status = LookupResult::Status::miss;
    r.message = "no winner stored for " + what;
    if (explain_miss) {
      std::size_t best = SIZE_MAX;
      for (Store* s : stores) {
        if (!s) continue;
        try {
          for (const Winner& w : s->winners()) {
            auto d = diff_keys(key, w.key);
            if (!d.empty() && d.size() < best) {
              best = d.size();
              r.nearest = w.key;
              r.nearest_db = s->path();
              r.nearest_diff = std::move(d);
            }
          }
        } catch (const Error& e) {
          impl_->warn("cannot scan winners of " + s->path() + ": " + e.what());
        }
      }
      r.message += "; " + describe_miss(r);
    }
    return r;
  }
  r.db = from->path();
  // Kernels are content-addressed: an intact copy in either database is the same kernel.
  std::vector<std::string> problems;
  Store* order[2] = {from, from == stores[0] ? stores[1] : stores[0]};
  for (Store* s : order) {
    if (!s) continue;
    try {
      if (auto k = s->kernel(r.winner->kernel_hash)) {
        r.kernel = std::move(k);
        r.status = LookupResult::Status::found;
        return r;
      }
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  r.status = LookupResult::Status::needs_rebuild;
  r.message = cat("winner ", r.winner->variant, " for ", what, " needs kernel ", r.winner->kernel_hash,
                  " rebuilt: ", problems.empty() ? std::string("no database holds it") : join(problems, "; "));
  return r;
}

LookupResult find_winner(const WinnerKey& key, const LookupOptions& opts, bool explain_miss) {
  WinnerLookup l(opts);
  return l.find(key, explain_miss);
}

std::string describe_miss(const LookupResult& r) {
  if (r.status != LookupResult::Status::miss) return r.message;
  if (!r.nearest) return "no stored winner to compare with";
  std::vector<std::string> parts;
  for (const auto& d : r.nearest_diff)
    parts.push_back(d.field + " (wanted " + d.wanted + ", stored " + d.stored + ")");
  return "nearest stored key (" + r.nearest_db + ") differs in " + join(parts, ", ");
}

}  // namespace sage::tuner
