# Container logs as podman writes them (k8s-file), read back by the local backend.
tessera_add_fuzzer(cri_log ${CMAKE_CURRENT_LIST_DIR}/backends_cri_log.cc tessera_backend_local)
