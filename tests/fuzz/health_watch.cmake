# NVML event records (nvmlEventData_t's bytes) through the decoder to the Signal the watcher hands
# over, and sysfs's AER counter text.
tessera_add_fuzzer(health_nvml_events ${CMAKE_CURRENT_LIST_DIR}/health_nvml_events.cc
  tessera_health_watch)
