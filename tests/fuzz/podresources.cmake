# kubelet's PodResources List answer, as the node agent decodes and bounds it.
tessera_add_fuzzer(podresources_list ${CMAKE_CURRENT_LIST_DIR}/podresources_list.cc
  tessera_podresources)
