// cdi-validate-go loads CDI spec files and directories with the CDI reference library
// (github.com/container-orchestrated-devices/container-device-interface, Debian's
// golang-github-container-orchestrated-devices-container-device-interface-dev) exactly as a
// runtime does, plus the library's builtin JSON schema, and reports every error.
//
//	cdi-validate-go FILE|DIR...
//
// A FILE is read with cdi.ReadSpec; a DIR is loaded as a spec directory by a cdi.Cache (which
// also reports devices defined twice in one directory). Prints "ok PATH" or "PATH: error"
// lines; exits 1 when anything was rejected.
//
// The library version Debian 12 ships (0.5.x) predates the "version too low for the fields
// used" rule; requiredVersion below ports it from the upstream library (pkg/cdi/version.go,
// requiresV040 and requiresV050; later fields are unknown to this library and rejected by its
// strict decoder anyway) and is installed with cdi.SetSpecValidator.
package main

import (
	"fmt"
	"os"
	"sort"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	"github.com/container-orchestrated-devices/container-device-interface/schema"
	specs "github.com/container-orchestrated-devices/container-device-interface/specs-go"
)

func isLetter(c byte) bool { return ('A' <= c && c <= 'Z') || ('a' <= c && c <= 'z') }

func allEdits(spec *specs.Spec) []*specs.ContainerEdits {
	edits := []*specs.ContainerEdits{&spec.ContainerEdits}
	for i := range spec.Devices {
		edits = append(edits, &spec.Devices[i].ContainerEdits)
	}
	return edits
}

func requiredVersion(spec *specs.Spec) string {
	for _, d := range spec.Devices {
		if len(d.Name) > 0 && !isLetter(d.Name[0]) {
			return "0.5.0"
		}
	}
	for _, e := range allEdits(spec) {
		for _, dn := range e.DeviceNodes {
			if dn.HostPath != "" {
				return "0.5.0"
			}
		}
	}
	for _, e := range allEdits(spec) {
		for _, m := range e.Mounts {
			if m.Type != "" {
				return "0.4.0"
			}
		}
	}
	return "0.3.0"
}

func validate(spec *specs.Spec) error {
	if err := schema.BuiltinSchema().ValidateType(spec); err != nil {
		return err
	}
	// All versions this library knows are x.y.0 with one digit each, so strings compare.
	if need := requiredVersion(spec); need > spec.Version {
		return fmt.Errorf("the spec version must be at least v%s", need)
	}
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: cdi-validate-go FILE|DIR...")
		os.Exit(2)
	}
	cdi.SetSpecValidator(validate)
	failed := false
	for _, path := range os.Args[1:] {
		info, err := os.Stat(path)
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		if !info.IsDir() {
			if _, err := cdi.ReadSpec(path, 0); err != nil {
				fmt.Printf("%s: %v\n", path, err)
				failed = true
			} else {
				fmt.Printf("ok %s\n", path)
			}
			continue
		}
		cache, err := cdi.NewCache(cdi.WithSpecDirs(path), cdi.WithAutoRefresh(false))
		if err != nil {
			fmt.Printf("%s: %v\n", path, err)
			failed = true
			continue
		}
		errs := cache.GetErrors()
		files := make([]string, 0, len(errs))
		for file := range errs {
			files = append(files, file)
		}
		sort.Strings(files)
		for _, file := range files {
			for _, err := range errs[file] {
				fmt.Printf("%s: %v\n", file, err)
				failed = true
			}
		}
		if len(errs) == 0 {
			fmt.Printf("ok %s (%d devices)\n", path, len(cache.ListDevices()))
		}
	}
	if failed {
		os.Exit(1)
	}
}
