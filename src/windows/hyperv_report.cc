// `--format json`: the whole chain and its preflight in one document, for tools.
#include <nlohmann/json.hpp>

#include "windows/hyperv.h"

namespace tessera::windows {
namespace {

using ojson = nlohmann::ordered_json;

}  // namespace

std::string HyperVGpuJson(const Snapshot& snapshot, const HyperVGpuPlan& plan,
                          const HyperVGpuPreflight& preflight) {
  const PciAdapter& a = plan.adapter;
  ojson out = ojson::object();
  out["host"] = {{"hostname", snapshot.hostname}, {"build", snapshot.os.build}};
  out["gpu"] = {{"index", plan.adapter_index},
                {"description", a.description},
                {"instance_id", a.instance_id},
                {"location_path", plan.location_path},
                {"dismounted", a.Dismounted()}};
  out["device"] = plan.device_string;
  out["runtime_handler"] = plan.runtime_handler;
  out["image"] = plan.image;
  out["pod_annotations"] = plan.pod_annotations;
  if (plan.mmio) {
    const MmioPlan& m = *plan.mmio;
    out["mmio"] = {{"below_4g_bytes", m.below_4g_bytes},
                   {"above_4g_bytes", m.above_4g_bytes},
                   {"low_gap_mb", m.low_gap_mb},
                   {"high_base_mb", m.high_base_mb},
                   {"high_gap_mb", m.high_gap_mb}};
  } else {
    out["mmio"] = nullptr;
  }
  out["pod_sandbox_config"] = ojson::parse(CriPodSandboxConfigJson(plan));
  out["container_config"] = ojson::parse(CriContainerConfigJson(plan));
  out["oci"] = ojson::parse(OciSpecJson(plan));
  auto hcs = HcsDocumentsJson(snapshot, plan);
  out["hcs"] = hcs ? ojson::parse(*hcs) : ojson(nullptr);
  out["hcs_refused"] = hcs ? ojson(nullptr) : ojson(hcs.error().message);
  out["powershell"] = {{"dismount", plan.dismount_steps}, {"give_back", plan.give_back_steps}};
  ojson checks = ojson::array();
  for (const PreflightCheck& c : preflight.checks) {
    checks.push_back({{"id", c.id},
                      {"status", CheckStatusName(c.status)},
                      {"detail", c.detail},
                      {"fix", c.fix}});
  }
  out["preflight"] = {
      {"passes", preflight.Passes()}, {"checks", checks}, {"notes", preflight.notes}};
  return out.dump(2, ' ', false, ojson::error_handler_t::replace) + "\n";
}

}  // namespace tessera::windows
