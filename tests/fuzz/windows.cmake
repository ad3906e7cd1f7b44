tessera_add_fuzzer(windows_device_string ${CMAKE_CURRENT_LIST_DIR}/windows_device_string.cc tessera_windows)
tessera_add_fuzzer(windows_snapshot ${CMAKE_CURRENT_LIST_DIR}/windows_snapshot.cc tessera_windows)
# The native discovery tool's containerd config reader (plain C++, built here too).
tessera_add_fuzzer(windows_containerd_config ${CMAKE_CURRENT_LIST_DIR}/windows_containerd_config.cc
  tessera_windows)
target_sources(fuzz_windows_containerd_config PRIVATE
  ${PROJECT_SOURCE_DIR}/src/inventory/windows/native_hyperv.cc)
