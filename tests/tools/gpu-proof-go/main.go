// gpu-proof checks what scripts/gpu-proof.sh needs checked on a real GPU machine, with the CDI
// reference library (github.com/container-orchestrated-devices/container-device-interface,
// Debian's golang-github-container-orchestrated-devices-container-device-interface-dev, the
// library runtimes use). Built static (CGO_ENABLED=0), so it runs wherever the kit is carried.
//
//	gpu-proof compare INVENTORY.json NVIDIA-SMI.csv [MIG.csv]
//	    `tessera inventory --format json` against `nvidia-smi --query-gpu=pci.bus_id,uuid,name,
//	    memory.total,driver_version --format=csv`, field by field, and against
//	    `--query-gpu=pci.bus_id,mig.mode.current` when MIG.csv is given.
//	gpu-proof libraries INVENTORY.json SONAME...
//	    the real file tessera found for each SONAME.
//	gpu-proof cdi-check DIR
//	    every host path the specs in DIR name (device nodes, mounts, hooks) must exist here.
//	gpu-proof cdi-apply -spec-dir DIR -config FILE -rootfs DIR -device NAME... -- CMD ARGS...
//	    the OCI config FILE (from `runc spec`) given the rootfs, the command and the CDI edits
//	    of the named devices, nothing else.
//
// Each prints one line per finding and exits 1 when anything disagrees or fails, 2 on usage.
package main

import (
	"fmt"
	"os"
)

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gpu-proof compare INVENTORY.json NVIDIA-SMI.csv [MIG.csv] | "+
		"libraries INVENTORY.json SONAME... | cdi-check DIR | "+
		"cdi-apply -spec-dir DIR -config FILE -rootfs DIR -device NAME... -- CMD...")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var ok bool
	switch os.Args[1] {
	case "compare":
		if len(os.Args) != 4 && len(os.Args) != 5 {
			usage()
		}
		mig := ""
		if len(os.Args) == 5 {
			mig = os.Args[4]
		}
		ok = compare(os.Args[2], os.Args[3], mig)
	case "libraries":
		if len(os.Args) < 4 {
			usage()
		}
		ok = libraries(os.Args[2], os.Args[3:])
	case "cdi-check":
		if len(os.Args) != 3 {
			usage()
		}
		ok = cdiCheck(os.Args[2])
	case "cdi-apply":
		ok = cdiApply(os.Args[2:])
	default:
		usage()
	}
	if !ok {
		os.Exit(1)
	}
}
