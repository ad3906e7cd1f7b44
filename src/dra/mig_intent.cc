// MIG by demand, durably: a prepare writes each placement's intent (claim, GPU, profile, start)
// in the claim's file before NVML makes the instance, and completes the file after. A plugin
// killed in between finds the instance again by its place on start (adopted for the claim) or
// finds none (the intent is dropped); an unprepare of such a claim destroys what is there.
#include "common/atomic_file.h"
#include "dra/dra.h"

namespace tessera::dra {
namespace {

// Finds each intent's instance; returns how many it found, or the first lookup's error.
Result<size_t> FindIntents(const MigHooks& hooks, PreparedClaim& claim,
                           std::map<std::string, std::set<uint32_t>>& owned) {
  size_t found = 0;
  for (auto& device : claim.devices) {
    if (!device.mig_intent) continue;
    MigIntent& intent = *device.mig_intent;
    auto gi = hooks.find(intent, owned[intent.pci_address]);
    if (!gi) return gi.error();
    intent.gpu_instance_id = *gi;
    if (*gi) {
      owned[intent.pci_address].insert(**gi);
      ++found;
    }
  }
  return found;
}

}  // namespace

std::vector<std::string> AdoptIntents(const MigHooks& hooks, const std::string& dir,
                                      Checkpoint& claims) {
  std::vector<std::string> out;
  if (!hooks.find) return out;
  // Instances of completed claims first: no intent takes one of them.
  Checkpoint completed;
  for (const auto& [uid, claim] : claims) {
    if (!claim.pending) completed[uid] = claim;
  }
  auto owned = Driver::OwnedInstances(completed);
  for (auto it = claims.begin(); it != claims.end();) {
    PreparedClaim& claim = it->second;
    if (!claim.pending) {
      ++it;
      continue;
    }
    const std::string name = "claim " + claim.ref.namespace_name + "/" + claim.ref.name;
    auto found = FindIntents(hooks, claim, owned);
    if (!found) {
      // Kept as it is: an unprepare or a retried prepare decides later.
      out.push_back(name + ": intent kept, NVML did not answer: " + found.error().message);
      ++it;
    } else if (*found > 0) {
      if (auto written = WritePreparedClaim(dir, claim, Durability::kProcessCrash); !written)
        out.push_back(name + ": " + written.error().message);
      out.push_back(name + ": " + std::to_string(*found) +
                    " MIG instance(s) made before a restart adopted");
      ++it;
    } else {
      (void)RemoveFile(PreparedClaimPath(dir, claim.ref.uid), Durability::kProcessCrash);
      out.push_back(name + ": intent without an instance dropped");
      it = claims.erase(it);
    }
  }
  return out;
}

Status ReleaseIntent(const MigHooks& hooks, const MigIntent& intent,
                     const std::set<uint32_t>& owned) {
  if (!hooks.find || !hooks.destroy) return Ok();
  auto gi = hooks.find(intent, owned);
  if (!gi) return gi.error();
  if (!*gi) return Ok();
  return hooks.destroy(MigInstance{intent.pci_address, **gi, 0, "", {}});
}

}  // namespace tessera::dra
