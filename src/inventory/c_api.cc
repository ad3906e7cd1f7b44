// The C API of include/tessera/tessera.h over the C++ inventory. Nothing here throws across the
// boundary: allocation failures become TESSERA_ERROR_OUT_OF_MEMORY.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "inventory/inventory.h"
#include "tessera/tessera.h"

struct tessera_inventory {
  tessera::inventory::Inventory value;
};

namespace {

char* CopyString(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

tessera_status StatusFor(const tessera::Error& error) {
  switch (error.category) {
    case tessera::ErrorCategory::kInvalidArgument:
      return TESSERA_ERROR_INVALID_ARGUMENT;
    case tessera::ErrorCategory::kNotFound:
      return TESSERA_ERROR_NOT_FOUND;
    case tessera::ErrorCategory::kUnavailable:
      return TESSERA_ERROR_UNAVAILABLE;
    default:
      return TESSERA_ERROR_INTERNAL;
  }
}

}  // namespace

extern "C" {

const char* tessera_version(int* api_version) {
  if (api_version) *api_version = TESSERA_API_VERSION;
  return TESSERA_VERSION;
}

const char* tessera_status_string(tessera_status status) {
  switch (status) {
    case TESSERA_OK:
      return "ok";
    case TESSERA_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case TESSERA_ERROR_NOT_FOUND:
      return "not found";
    case TESSERA_ERROR_UNAVAILABLE:
      return "unavailable";
    case TESSERA_ERROR_INTERNAL:
      return "internal error";
    case TESSERA_ERROR_OUT_OF_MEMORY:
      return "out of memory";
  }
  return "unknown status";
}

tessera_status tessera_inventory_create(const char* root, tessera_inventory** out,
                                        char** error_message) {
  std::string nvml = tessera::inventory::DefaultNvmlLibrary(root ? root : "/");
  return tessera_inventory_create_with_nvml(root, nvml.c_str(), out, error_message);
}

tessera_status tessera_inventory_create_with_nvml(const char* root, const char* nvml_library,
                                                  tessera_inventory** out, char** error_message) {
  if (error_message) *error_message = nullptr;
  if (!out) return TESSERA_ERROR_INVALID_ARGUMENT;
  *out = nullptr;
  try {
    tessera::inventory::ReadOptions options;
    options.root = root ? root : "/";
    options.nvml_library = nvml_library ? nvml_library : "";
    auto inventory = tessera::inventory::ReadInventory(options);
    if (!inventory) {
      if (error_message) *error_message = CopyString(inventory.error().message);
      return StatusFor(inventory.error());
    }
    *out = new tessera_inventory{std::move(*inventory)};  // freed by tessera_inventory_destroy
    return TESSERA_OK;
  } catch (const std::bad_alloc&) {
    return TESSERA_ERROR_OUT_OF_MEMORY;
  } catch (...) {
    return TESSERA_ERROR_INTERNAL;
  }
}

void tessera_inventory_destroy(tessera_inventory* inventory) {
  std::unique_ptr<tessera_inventory> owned(inventory);
}

tessera_status tessera_inventory_device_count(const tessera_inventory* inventory, size_t* count) {
  if (!inventory || !count) return TESSERA_ERROR_INVALID_ARGUMENT;
  *count = inventory->value.devices.size();
  return TESSERA_OK;
}

tessera_status tessera_inventory_device(const tessera_inventory* inventory, size_t index,
                                        tessera_device_info* info) {
  if (!inventory || !info || index >= inventory->value.devices.size()) {
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const auto& d = inventory->value.devices[index];
  info->pci_address = d.pci_address.c_str();
  info->vendor_id = d.vendor_id;
  info->device_id = d.device_id;
  info->class_code = d.class_code;
  info->kind = static_cast<tessera_device_kind>(d.kind);
  info->model = d.model.c_str();
  info->driver = d.driver.c_str();
  info->iommu_group = d.iommu_group ? *d.iommu_group : -1;
  info->numa_node = d.numa_node;
  info->device_node_count = d.device_nodes.size();
  info->warning_count = d.warnings.size();
  return TESSERA_OK;
}

tessera_status tessera_inventory_device_node(const tessera_inventory* inventory, size_t index,
                                             size_t node_index, const char** path, uint32_t* major,
                                             uint32_t* minor) {
  if (!inventory || !path || !major || !minor || index >= inventory->value.devices.size()) {
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const auto& nodes = inventory->value.devices[index].device_nodes;
  if (node_index >= nodes.size()) return TESSERA_ERROR_INVALID_ARGUMENT;
  *path = nodes[node_index].path.c_str();
  *major = nodes[node_index].major;
  *minor = nodes[node_index].minor;
  return TESSERA_OK;
}

tessera_status tessera_inventory_nvidia_driver_version(const tessera_inventory* inventory,
                                                       const char** version) {
  if (!inventory || !version) return TESSERA_ERROR_INVALID_ARGUMENT;
  if (!inventory->value.nvidia_driver) return TESSERA_ERROR_NOT_FOUND;
  *version = inventory->value.nvidia_driver->version.c_str();
  return TESSERA_OK;
}

tessera_status tessera_inventory_mig_mode(const tessera_inventory* inventory, size_t index,
                                          int* current, int* pending) {
  if (!inventory || !current || !pending || index >= inventory->value.devices.size()) {
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const auto& mig = inventory->value.devices[index].mig;
  if (!mig) return TESSERA_ERROR_NOT_FOUND;
  auto as_int = [](const std::optional<bool>& on) { return on ? (*on ? 1 : 0) : -1; };
  *current = as_int(mig->enabled);
  *pending = as_int(mig->pending);
  return TESSERA_OK;
}

tessera_status tessera_inventory_mig_device_count(const tessera_inventory* inventory, size_t index,
                                                  size_t* count) {
  if (!inventory || !count || index >= inventory->value.devices.size()) {
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const auto& mig = inventory->value.devices[index].mig;
  *count = mig ? mig->devices.size() : 0;
  return TESSERA_OK;
}

tessera_status tessera_inventory_mig_device(const tessera_inventory* inventory, size_t index,
                                            size_t mig_index, tessera_mig_device_info* info) {
  if (!inventory || !info || index >= inventory->value.devices.size()) {
    return TESSERA_ERROR_INVALID_ARGUMENT;
  }
  const auto& mig = inventory->value.devices[index].mig;
  if (!mig || mig_index >= mig->devices.size()) return TESSERA_ERROR_INVALID_ARGUMENT;
  const tessera::inventory::MigDevice& m = mig->devices[mig_index];
  info->index = m.index;
  info->gpu_instance_id = m.gpu_instance_id;
  info->compute_instance_id = m.compute_instance_id;
  info->profile = m.profile.c_str();
  info->profile_id = m.profile_id ? static_cast<int32_t>(*m.profile_id) : -1;
  info->placement_start = m.placement ? static_cast<int32_t>(m.placement->start) : -1;
  info->placement_size = m.placement ? static_cast<int32_t>(m.placement->size) : -1;
  info->uuid = m.uuid.c_str();
  info->memory_bytes = m.memory_bytes;
  info->multiprocessors = m.multiprocessors;
  auto node = [](const std::optional<tessera::inventory::DeviceNode>& n, const char** path,
                 uint32_t* major, uint32_t* minor) {
    *path = n ? n->path.c_str() : "";
    *major = n ? n->major : 0;
    *minor = n ? n->minor : 0;
  };
  node(m.gpu_instance_node, &info->gpu_instance_node, &info->gpu_instance_node_major,
       &info->gpu_instance_node_minor);
  node(m.compute_instance_node, &info->compute_instance_node, &info->compute_instance_node_major,
       &info->compute_instance_node_minor);
  return TESSERA_OK;
}

tessera_status tessera_inventory_to_json(const tessera_inventory* inventory, char** json) {
  if (!inventory || !json) return TESSERA_ERROR_INVALID_ARGUMENT;
  try {
    *json = CopyString(tessera::inventory::ToJson(inventory->value));
    return *json ? TESSERA_OK : TESSERA_ERROR_OUT_OF_MEMORY;
  } catch (const std::bad_alloc&) {
    return TESSERA_ERROR_OUT_OF_MEMORY;
  }
}

void tessera_string_free(char* text) {
  std::free(text);
}

}  // extern "C"
