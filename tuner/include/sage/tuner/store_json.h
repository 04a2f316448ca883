// JSON forms of the tune store's records (nlohmann::json), as `sage-tune ... --json` prints
// them. Optional values are null when absent; timestamps are unix seconds.
#pragma once
#include <nlohmann/json.hpp>

#include "sage/tuner/store.h"

namespace sage::tuner {

void to_json(nlohmann::json& j, const DeviceFingerprint& d);
void to_json(nlohmann::json& j, const ProblemKey& p);
void to_json(nlohmann::json& j, const WinnerKey& k);
void to_json(nlohmann::json& j, const FieldDiff& d);
void to_json(nlohmann::json& j, const VariantRecord& v);
void to_json(nlohmann::json& j, const CompileStats& s);
void to_json(nlohmann::json& j, const KernelInfo& k);
void to_json(nlohmann::json& j, const Accuracy& a);
void to_json(nlohmann::json& j, const Measurement& m);
void to_json(nlohmann::json& j, const Winner& w);
void to_json(nlohmann::json& j, const QuarantineEntry& q);
void to_json(nlohmann::json& j, const StoreCounts& c);
void to_json(nlohmann::json& j, const OpenReport& r);
void to_json(nlohmann::json& j, const GcReport& r);
void to_json(nlohmann::json& j, const MergeReport& r);
void to_json(nlohmann::json& j, const StoreHealth& h);
void to_json(nlohmann::json& j, const LookupResult& r);  // without the cubin bytes

}  // namespace sage::tuner
