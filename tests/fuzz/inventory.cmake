# Parsers of host text and binary files read by the inventory.
tessera_add_fuzzer(ldcache ${CMAKE_CURRENT_LIST_DIR}/inventory_ldcache.cc tessera_inventory)
tessera_add_fuzzer(procfs_sysfs ${CMAKE_CURRENT_LIST_DIR}/inventory_procfs_sysfs.cc tessera_inventory)
tessera_add_fuzzer(pci_ids ${CMAKE_CURRENT_LIST_DIR}/inventory_pci_ids.cc tessera_inventory)
tessera_add_fuzzer(inventory_json ${CMAKE_CURRENT_LIST_DIR}/inventory_json.cc tessera_inventory)
tessera_add_fuzzer(mig_capabilities ${CMAKE_CURRENT_LIST_DIR}/inventory_mig_capabilities.cc tessera_inventory)
tessera_add_fuzzer(loader_config ${CMAKE_CURRENT_LIST_DIR}/inventory_loader_config.cc tessera_inventory)
