/* tessera C API: the node inventory for consumers that are not C++ (container runtimes, hooks,
 * language bindings). Opaque handles, status codes, out-parameters; every object the library
 * returns is freed by the matching tessera_*_free/destroy call. All functions are thread-safe:
 * an inventory handle is immutable after creation and may be shared between threads. */
#ifndef TESSERA_TESSERA_H_
#define TESSERA_TESSERA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define TESSERA_API_VERSION 2 /* 2: MIG devices */

typedef enum tessera_status {
  TESSERA_OK = 0,
  TESSERA_ERROR_INVALID_ARGUMENT = 1, /* a NULL pointer, a bad index, a root that is no directory */
  TESSERA_ERROR_NOT_FOUND = 2,
  TESSERA_ERROR_UNAVAILABLE = 3,
  TESSERA_ERROR_INTERNAL = 4,
  TESSERA_ERROR_OUT_OF_MEMORY = 5,
} tessera_status;

typedef enum tessera_device_kind {
  TESSERA_DEVICE_GPU = 0,
  TESSERA_DEVICE_ACCELERATOR = 1,
  TESSERA_DEVICE_NVSWITCH = 2,
  TESSERA_DEVICE_COMPANION = 3,
} tessera_device_kind;

typedef struct tessera_inventory tessera_inventory; /* opaque */

/* One device, copied out by value. String fields point into the inventory that owns them and
 * stay valid until tessera_inventory_destroy. */
typedef struct tessera_device_info {
  const char* pci_address; /* "0000:18:00.0" */
  uint16_t vendor_id;
  uint16_t device_id;
  uint32_t class_code;
  tessera_device_kind kind;
  const char* model;
  const char* driver;  /* "" when no driver is bound */
  int32_t iommu_group; /* -1 when the device has none */
  int32_t numa_node;   /* -1 when unknown */
  size_t device_node_count;
  size_t warning_count;
} tessera_device_info;

/* One MIG device (a compute instance in a GPU instance) of an NVIDIA GPU. Strings are owned by
 * the inventory. Facts that come from NVML are "" or -1 when NVML could not be asked. */
typedef struct tessera_mig_device_info {
  uint32_t index; /* NVML's MIG handle index: the <mig> of CDI name "<gpu>:<mig>" */
  uint32_t gpu_instance_id;
  uint32_t compute_instance_id;
  const char* profile;           /* "1g.10gb", "1g.10gb+me"; "" when unknown */
  int32_t profile_id;            /* nvidia-smi GPU instance profile ID (19 = 1g.10gb on H100); -1 */
  int32_t placement_start;       /* first memory slice; -1 when unknown */
  int32_t placement_size;        /* memory slices covered; -1 when unknown */
  const char* uuid;              /* "MIG-..."; "" when unknown */
  uint64_t memory_bytes;         /* 0 when unknown */
  uint32_t multiprocessors;      /* 0 when unknown */
  const char* gpu_instance_node; /* "/dev/nvidia-caps/nvidia-cap<N>"; "" when unknown */
  uint32_t gpu_instance_node_major;
  uint32_t gpu_instance_node_minor;
  const char* compute_instance_node; /* "" when unknown */
  uint32_t compute_instance_node_major;
  uint32_t compute_instance_node_minor;
} tessera_mig_device_info;

/* Library version; also the API version it implements in *api_version when not NULL. */
const char* tessera_version(int* api_version);

/* A short description of a status code ("invalid argument"). Never NULL. */
const char* tessera_status_string(tessera_status status);

/* Reads the host under `root` ("/" when NULL). On success *out owns a new inventory. On failure
 * *error_message (when not NULL) receives a message to free with tessera_string_free. */
tessera_status tessera_inventory_create(const char* root, tessera_inventory** out,
                                        char** error_message);
/* As tessera_inventory_create, naming the NVML library to ask for MIG facts ("" or NULL: none,
 * procfs only). tessera_inventory_create uses libnvidia-ml.so.1 for root "/" and none else. */
tessera_status tessera_inventory_create_with_nvml(const char* root, const char* nvml_library,
                                                  tessera_inventory** out, char** error_message);
void tessera_inventory_destroy(tessera_inventory* inventory);

tessera_status tessera_inventory_device_count(const tessera_inventory* inventory, size_t* count);
tessera_status tessera_inventory_device(const tessera_inventory* inventory, size_t index,
                                        tessera_device_info* info);
/* The path, major and minor of a device's node `node_index`; *path is owned by the inventory. */
tessera_status tessera_inventory_device_node(const tessera_inventory* inventory, size_t index,
                                             size_t node_index, const char** path, uint32_t* major,
                                             uint32_t* minor);
/* NVIDIA driver version, or NOT_FOUND when no NVIDIA driver is loaded. Owned by the inventory. */
tessera_status tessera_inventory_nvidia_driver_version(const tessera_inventory* inventory,
                                                       const char** version);
/* MIG mode of device `index`: *current and *pending are 1 enabled, 0 disabled, -1 unknown.
 * NOT_FOUND when the device does not support MIG (or is no NVIDIA GPU). */
tessera_status tessera_inventory_mig_mode(const tessera_inventory* inventory, size_t index,
                                          int* current, int* pending);
/* MIG devices of device `index` (0 when it has none or no MIG). */
tessera_status tessera_inventory_mig_device_count(const tessera_inventory* inventory, size_t index,
                                                  size_t* count);
tessera_status tessera_inventory_mig_device(const tessera_inventory* inventory, size_t index,
                                            size_t mig_index, tessera_mig_device_info* info);
/* The whole inventory as the JSON of docs/inventory-schema.md; free with tessera_string_free. */
tessera_status tessera_inventory_to_json(const tessera_inventory* inventory, char** json);

void tessera_string_free(char* text);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_TESSERA_H_ */
