package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	cdispecs "github.com/container-orchestrated-devices/container-device-interface/specs-go"
	oci "github.com/opencontainers/runtime-spec/specs-go"
)

// Every host path one set of edits names: device nodes (hostPath, else path), mounts, hooks.
func hostPaths(edits *cdispecs.ContainerEdits) []string {
	var paths []string
	for _, node := range edits.DeviceNodes {
		if node.HostPath != "" {
			paths = append(paths, node.HostPath)
		} else {
			paths = append(paths, node.Path)
		}
	}
	for _, mount := range edits.Mounts {
		paths = append(paths, mount.HostPath)
	}
	for _, hook := range edits.Hooks {
		paths = append(paths, hook.Path)
	}
	return paths
}

// cdiCheck requires every host path the specs in dir name to exist here (the specs' validity is
// cdi-validate-go's to judge, tests/tools/cdi-validate-go).
func cdiCheck(dir string) bool {
	matches, _ := filepath.Glob(filepath.Join(dir, "*"))
	ok := true
	checked, devices := 0, 0
	for _, file := range matches {
		spec, err := cdi.ReadSpec(file, 0)
		if err != nil {
			fmt.Printf("cdi %s: FAIL (%v)\n", filepath.Base(file), err)
			ok = false
			continue
		}
		devices += len(spec.Devices)
		all := []*cdispecs.ContainerEdits{&spec.ContainerEdits}
		for i := range spec.Devices {
			all = append(all, &spec.Devices[i].ContainerEdits)
		}
		for _, edits := range all {
			for _, path := range hostPaths(edits) {
				checked++
				if _, err := os.Stat(path); err != nil {
					fmt.Printf("cdi %s: FAIL (host path %s: %v)\n", filepath.Base(file), path, err)
					ok = false
				}
			}
		}
	}
	if ok {
		fmt.Printf("cdi %s: ok (%d specs, %d devices, %d host paths, all present)\n", dir,
			len(matches), devices, checked)
	}
	return ok && len(matches) > 0
}

type deviceList []string

func (d *deviceList) String() string     { return fmt.Sprint(*d) }
func (d *deviceList) Set(v string) error { *d = append(*d, v); return nil }

func cdiApply(args []string) bool {
	flags := flag.NewFlagSet("cdi-apply", flag.ExitOnError)
	specDir := flags.String("spec-dir", "", "CDI spec directory")
	configPath := flags.String("config", "", "OCI config.json to edit in place")
	rootfs := flags.String("rootfs", "", "the container's root directory")
	var devices deviceList
	flags.Var(&devices, "device", "fully qualified CDI device name (repeatable)")
	flags.Parse(args)
	command := flags.Args()
	if *specDir == "" || *configPath == "" || *rootfs == "" || len(devices) == 0 || len(command) == 0 {
		usage()
	}
	var config oci.Spec
	raw, err := os.ReadFile(*configPath)
	if err == nil {
		err = json.Unmarshal(raw, &config)
	}
	if err != nil {
		fmt.Printf("cdi-apply: FAIL (%s: %v)\n", *configPath, err)
		return false
	}
	config.Root = &oci.Root{Path: *rootfs, Readonly: true}
	config.Process.Terminal = false
	config.Process.Args = command
	cache, err := cdi.NewCache(cdi.WithSpecDirs(*specDir), cdi.WithAutoRefresh(false))
	if err != nil {
		fmt.Printf("cdi-apply: FAIL (%v)\n", err)
		return false
	}
	unresolved, err := cache.InjectDevices(&config, devices...)
	if err != nil || len(unresolved) > 0 {
		fmt.Printf("cdi-apply: FAIL (unresolved %v: %v)\n", unresolved, err)
		return false
	}
	out, err := json.MarshalIndent(&config, "", "  ")
	if err == nil {
		err = os.WriteFile(*configPath, out, 0o644)
	}
	if err != nil {
		fmt.Printf("cdi-apply: FAIL (%v)\n", err)
		return false
	}
	fmt.Printf("cdi-apply: ok (%v into %s)\n", []string(devices), *configPath)
	return true
}
