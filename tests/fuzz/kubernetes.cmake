tessera_add_fuzzer(kubeconfig ${CMAKE_CURRENT_LIST_DIR}/kubernetes_kubeconfig.cc tessera_k8s)
