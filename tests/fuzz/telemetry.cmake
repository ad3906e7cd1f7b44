# /proc/<pid>/cgroup and /proc/<pid>/stat text as the collector parses them, and NVML's raw
# per-process records through the merge, attribution and integration of one pass.
tessera_add_fuzzer(telemetry_cgroup ${CMAKE_CURRENT_LIST_DIR}/telemetry_cgroup.cc tessera_telemetry)
tessera_add_fuzzer(telemetry_proc_stat ${CMAKE_CURRENT_LIST_DIR}/telemetry_proc_stat.cc
  tessera_telemetry)
tessera_add_fuzzer(telemetry_process_lists ${CMAKE_CURRENT_LIST_DIR}/telemetry_process_lists.cc
  tessera_telemetry)
# Whole requests to the node agent's endpoint: Beast's parser with its limits, then the token
# check and the answer (endpoint_http.h).
find_package(Boost 1.74 REQUIRED COMPONENTS system)
tessera_add_fuzzer(telemetry_endpoint_requests
  ${CMAKE_CURRENT_LIST_DIR}/telemetry_endpoint_requests.cc tessera_telemetry Boost::system)
