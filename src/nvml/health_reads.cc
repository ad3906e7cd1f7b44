// Health reads: the fault events a GPU raises (critical Xids, double-bit ECC errors) and the
// fault state read after them (remapped rows, retired pages, uncorrected ECC counts, the
// driver's recovery action). Like the telemetry reads, each says how it went; a GPU that fell
// off the bus answers kGpuLost from every one of them.
#include <cstring>

#include "nvml/library_api.h"

namespace tessera::nvml {

void BindHealth(Library::Api& api) {
  void* h = api.handle;
  Bind(h, api.remapped_rows, "nvmlDeviceGetRemappedRows");
  Bind(h, api.retired_pages_pending, "nvmlDeviceGetRetiredPagesPendingStatus");
  Bind(h, api.total_ecc, "nvmlDeviceGetTotalEccErrors");
  Bind(h, api.field_values, "nvmlDeviceGetFieldValues");
  Bind(h, api.pci_info, "nvmlDeviceGetPciInfo_v3");
}

Read<Gpu> Library::HandleByPci(const std::string& pci_address) const {
  Device device = nullptr;
  Return r = api_->by_pci(pci_address.c_str(), &device);
  return Answer<Gpu>(r, Gpu(device));
}

Read<std::string> Library::PciAddress(Gpu gpu) const {
  if (!api_->pci_info) return Missing<std::string>();
  abi::PciInfo info{};
  Return r = api_->pci_info(DeviceOf(gpu), &info);
  std::string address =
      SysfsPciAddress(std::string_view(info.bus_id, strnlen(info.bus_id, sizeof info.bus_id)));
  if (r == kSuccess && address.empty()) r = kErrorInvalidArgument;  // a bus ID of another shape
  return Answer<std::string>(r, std::move(address));
}

Read<RowRemapping> Library::RemappedRows(Gpu gpu) const {
  if (!api_->remapped_rows) return Missing<RowRemapping>();
  unsigned int correctable = 0, uncorrectable = 0, pending = 0, failure = 0;
  Return r = api_->remapped_rows(DeviceOf(gpu), &correctable, &uncorrectable, &pending, &failure);
  return Answer<RowRemapping>(r, {correctable, uncorrectable, pending != 0, failure != 0});
}

Read<bool> Library::RetiredPagesPending(Gpu gpu) const {
  if (!api_->retired_pages_pending) return Missing<bool>();
  unsigned int pending = 0;  // nvmlEnableState_t
  Return r = api_->retired_pages_pending(DeviceOf(gpu), &pending);
  return Answer<bool>(r, pending == kFeatureEnabled);
}

Read<uint64_t> Library::VolatileUncorrectedEcc(Gpu gpu) const {
  if (!api_->total_ecc) return Missing<uint64_t>();
  unsigned long long count = 0;
  Return r = api_->total_ecc(DeviceOf(gpu), kMemoryErrorTypeUncorrected, kVolatileEcc, &count);
  return Answer<uint64_t>(r, count);
}

namespace {

// A field value's number, by its type; nullopt for a negative or fractional one.
std::optional<uint64_t> FieldNumber(const FieldValue& field) {
  switch (field.value_type) {
    case kValueTypeUnsignedInt: {
      unsigned int v;
      std::memcpy(&v, field.value, sizeof v);
      return v;
    }
    case kValueTypeUnsignedLong:
    case kValueTypeUnsignedLongLong: {
      unsigned long long v;
      std::memcpy(&v, field.value, sizeof v);
      return v;
    }
    case kValueTypeSignedLongLong: {
      long long v;
      std::memcpy(&v, field.value, sizeof v);
      return v < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(v));
    }
    case kValueTypeSignedInt: {
      int v;
      std::memcpy(&v, field.value, sizeof v);
      return v < 0 ? std::nullopt : std::optional<uint64_t>(static_cast<uint64_t>(v));
    }
    case kValueTypeUnsignedShort: {
      unsigned short v;
      std::memcpy(&v, field.value, sizeof v);
      return v;
    }
    default:
      return std::nullopt;  // a double, or a type this build does not know
  }
}

}  // namespace

Read<uint32_t> Library::RecoveryAction(Gpu gpu) const {
  if (!api_->field_values) return Missing<uint32_t>();
  FieldValue field{};
  field.field_id = kFieldGpuRecoveryAction;
  Return r = api_->field_values(DeviceOf(gpu), 1, &field);
  // The call succeeds as a whole; each field carries its own return code (NOT_SUPPORTED on
  // drivers before the field existed).
  if (r == kSuccess) r = field.nvml_return;
  std::optional<uint64_t> number = r == kSuccess ? FieldNumber(field) : std::nullopt;
  if (r == kSuccess && (!number || *number > 0xFFFFFFFFu)) r = kErrorInvalidArgument;
  return Answer<uint32_t>(r, number ? static_cast<uint32_t>(*number) : 0);
}

Read<uint64_t> Library::RegisterEvents(Gpu gpu, uint64_t types) {
  if (!api_->event_set_create || !api_->register_events || !api_->event_wait)
    return Missing<uint64_t>();
  if (!api_->health_set) {
    if (Return r = api_->event_set_create(&api_->health_set); r != kSuccess)
      return Answer<uint64_t>(r);
  }
  Return r = api_->register_events(DeviceOf(gpu), types, api_->health_set);
  if (r == kSuccess) return Answer<uint64_t>(r, types);
  if (r != kErrorNotSupported) return Answer<uint64_t>(r);
  // NOT_SUPPORTED names the mask as a whole: try each type on its own.
  uint64_t registered = 0;
  for (uint64_t bit = 1; bit != 0 && bit <= types; bit <<= 1) {
    if (!(types & bit)) continue;
    if (api_->register_events(DeviceOf(gpu), bit, api_->health_set) == kSuccess) registered |= bit;
  }
  return Answer<uint64_t>(registered ? kSuccess : kErrorNotSupported, registered);
}

Read<Event> Library::WaitEvent(uint32_t timeout_ms) const {
  if (!api_->health_set || !api_->event_wait) return Missing<Event>();
  EventData data{};
  Return r = api_->event_wait(api_->health_set, &data, timeout_ms);
  if (r == kErrorTimeout) return Answer<Event>(kErrorNotFound);
  // Through the decoder the fuzz target reaches: the record's bytes as NVML left them.
  auto event = DecodeEventData(std::string_view(reinterpret_cast<const char*>(&data), sizeof data));
  return Answer<Event>(r, event.value_or(Event{}));
}

}  // namespace tessera::nvml
