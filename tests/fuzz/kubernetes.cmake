tessera_add_fuzzer(kubeconfig ${CMAKE_CURRENT_LIST_DIR}/kubernetes_kubeconfig.cc tessera_k8s)
tessera_add_fuzzer(node_gpus ${CMAKE_CURRENT_LIST_DIR}/kubernetes_node_gpus.cc tessera_k8s_objects)
# A ResourceClaim's status as the control plane reads it back (the scheduler's allocation).
tessera_add_fuzzer(claim_allocation ${CMAKE_CURRENT_LIST_DIR}/kubernetes_claim_allocation.cc
  tessera_k8s_objects)
tessera_add_fuzzer(state_objects ${CMAKE_CURRENT_LIST_DIR}/kubernetes_state_objects.cc tessera_backend_kubernetes)
# What the client makes of an API server's bodies and watch streams.
tessera_add_fuzzer(k8s_responses ${CMAKE_CURRENT_LIST_DIR}/kubernetes_responses.cc tessera_k8s)
# The node lease file tessera-lease-sync writes from GpuLeases, read back as the plugins read it.
tessera_add_fuzzer(k8s_lease_file ${CMAKE_CURRENT_LIST_DIR}/kubernetes_lease_file.cc
  tessera_node_lease_file tessera_k8s
  tessera_deviceplugin)
# A published container's Service and Pod as Exposed reads them back.
tessera_add_fuzzer(published_service ${CMAKE_CURRENT_LIST_DIR}/kubernetes_published_service.cc
  tessera_k8s_objects)
