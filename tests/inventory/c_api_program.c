/* A plain C consumer of libtessera: prints what it reads; exits non-zero on any API misuse
 * the library fails to reject. Driven by c_api_test.cc. */
#include <stdio.h>
#include <string.h>
#include <tessera/tessera.h>

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "check failed line %d: %s\n", __LINE__, #cond); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main(int argc, char** argv) {
  int api = 0;
  const char* version = tessera_version(&api);
  CHECK(version != NULL && api == TESSERA_API_VERSION);

  char* error = NULL;
  tessera_inventory* inventory = NULL;
  CHECK(tessera_inventory_create("/nonexistent-root", &inventory, &error) ==
        TESSERA_ERROR_INVALID_ARGUMENT);
  CHECK(inventory == NULL && error != NULL && strstr(error, "/nonexistent-root") != NULL);
  tessera_string_free(error);
  CHECK(tessera_inventory_create(argc > 1 ? argv[1] : "/", NULL, NULL) ==
        TESSERA_ERROR_INVALID_ARGUMENT);

  CHECK(tessera_inventory_create(argc > 1 ? argv[1] : "/", &inventory, &error) == TESSERA_OK);
  size_t count = 0;
  CHECK(tessera_inventory_device_count(inventory, &count) == TESSERA_OK);
  for (size_t i = 0; i < count; ++i) {
    tessera_device_info info;
    CHECK(tessera_inventory_device(inventory, i, &info) == TESSERA_OK);
    printf("%s %04x:%04x kind=%d driver=%s group=%d numa=%d nodes=%zu", info.pci_address,
           info.vendor_id, info.device_id, (int)info.kind, info.driver, info.iommu_group,
           info.numa_node, info.device_node_count);
    for (size_t n = 0; n < info.device_node_count; ++n) {
      const char* path;
      uint32_t major, minor;
      CHECK(tessera_inventory_device_node(inventory, i, n, &path, &major, &minor) == TESSERA_OK);
      printf(" %s=%u:%u", path, major, minor);
    }
    printf("\n");
    int current = 0, pending = 0;
    tessera_status mig = tessera_inventory_mig_mode(inventory, i, &current, &pending);
    size_t mig_count = 99;
    CHECK(tessera_inventory_mig_device_count(inventory, i, &mig_count) == TESSERA_OK);
    if (mig == TESSERA_ERROR_NOT_FOUND) {
      CHECK(mig_count == 0);
      continue;
    }
    CHECK(mig == TESSERA_OK);
    printf("mig %s current=%d pending=%d devices=%zu\n", info.pci_address, current, pending,
           mig_count);
    for (size_t m = 0; m < mig_count; ++m) {
      tessera_mig_device_info d;
      CHECK(tessera_inventory_mig_device(inventory, i, m, &d) == TESSERA_OK);
      printf("mig-device %u gi=%u ci=%u profile=%s id=%d gi-node=%s=%u:%u ci-node=%s=%u:%u\n",
             d.index, d.gpu_instance_id, d.compute_instance_id, d.profile, d.profile_id,
             d.gpu_instance_node, d.gpu_instance_node_major, d.gpu_instance_node_minor,
             d.compute_instance_node, d.compute_instance_node_major, d.compute_instance_node_minor);
    }
    tessera_mig_device_info beyond;
    CHECK(tessera_inventory_mig_device(inventory, i, mig_count, &beyond) ==
          TESSERA_ERROR_INVALID_ARGUMENT);
  }
  tessera_device_info unused;
  CHECK(tessera_inventory_device(inventory, count, &unused) == TESSERA_ERROR_INVALID_ARGUMENT);
  const char* driver = NULL;
  tessera_status status = tessera_inventory_nvidia_driver_version(inventory, &driver);
  printf("driver %s\n", status == TESSERA_OK ? driver : tessera_status_string(status));
  char* json = NULL;
  CHECK(tessera_inventory_to_json(inventory, &json) == TESSERA_OK);
  CHECK(strstr(json, "\"schema_version\": 1") != NULL);
  tessera_string_free(json);
  tessera_inventory_destroy(inventory);
  return 0;
}
