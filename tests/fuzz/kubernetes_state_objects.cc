// Fuzzes the readers of the control plane's records from cluster objects: whoever may write
// GpuContainers, Tenancies, or Secrets and ConfigMaps in the control plane's namespace writes what
// every replica reads (audit records: what GET /v1/audit answers).
// Any JSON is a record or an error naming the field; what reads back writes to an object that
// reads to the same record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backends/kubernetes/audit_objects.h"
#include "backends/kubernetes/state_objects.h"
#include "common/untrusted_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (!tessera::CheckJsonNesting(text).ok()) return 0;
  auto json = tessera::k8s::Json::parse(text, nullptr, false);
  if (json.is_discarded()) return 0;
  auto container = tessera::k8s::ContainerRecordOf(json);
  if (!container.ok()) {
    if (container.error().message.empty()) std::abort();
  } else {
    auto again = tessera::k8s::ContainerRecordOf(tessera::k8s::GpuContainerObject(*container));
    if (!again.ok() || !(*again == *container)) std::abort();
  }
  auto token = tessera::k8s::TokenRecordOf(json);
  if (token.ok()) {
    auto again = tessera::k8s::TokenRecordOf(tessera::k8s::TokenSecret(*token, "ns"));
    if (!again.ok() || !(*again == *token)) std::abort();
  }
  auto tenancy = tessera::k8s::TenancyRecordOf(json);
  if (tenancy.ok()) {
    auto again = tessera::k8s::TenancyRecordOf(tessera::k8s::TenancyObject(*tenancy));
    if (!again.ok() || !(*again == *tenancy)) std::abort();
  } else if (tenancy.error().message.empty()) {
    std::abort();
  }
  auto gpus = tessera::k8s::GpuRecordsOf(json);
  if (gpus.ok()) {
    auto object = tessera::k8s::GpuRecordsObject("node", "ns");
    bool bounded = true;  // escaping may grow a record past the reader's bound
    for (const auto& gpu : *gpus) {
      std::string text = tessera::k8s::GpuRecordText(gpu);
      bounded = bounded && text.size() <= (64u << 10);
      object["data"][tessera::k8s::GpuRecordKey(gpu.pci_address)] = std::move(text);
    }
    auto again = tessera::k8s::GpuRecordsOf(object);
    if (bounded && (!again.ok() || again->size() != gpus->size())) std::abort();
    for (size_t i = 0; bounded && i < gpus->size(); ++i)
      if (!((*again)[i] == (*gpus)[i])) std::abort();
  }
  auto usage = tessera::k8s::UsageRecordOf(json);
  if (usage.ok()) {
    auto again = tessera::k8s::UsageRecordOf(tessera::k8s::UsageConfigMap(*usage, "ns"));
    if (!again.ok() || !(*again == *usage)) std::abort();
  }
  auto audit = tessera::k8s::AuditEntryOf(json);
  if (audit.ok()) {
    auto again =
        tessera::k8s::AuditEntryOf(tessera::k8s::AuditConfigMap(audit->record, audit->seq, "ns"));
    if (!again.ok() || again->seq != audit->seq || !(again->record == audit->record)) std::abort();
  } else if (audit.error().message.empty()) {
    std::abort();
  }
  (void)tessera::k8s::AdminTokenHashOf(json);
  return 0;
}
