package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The fields of `tessera inventory --format json` compared (docs/inventory-schema.md).
type inventory struct {
	Devices []struct {
		PciAddress  string  `json:"pci_address"`
		Kind        string  `json:"kind"`
		VendorID    string  `json:"vendor_id"`
		GpuUUID     *string `json:"gpu_uuid"`
		ProductName *string `json:"product_name"`
		MemoryBytes *uint64 `json:"memory_bytes"`
		Mig         *struct {
			Mode *string `json:"mode"`
		} `json:"mig"`
	} `json:"devices"`
	NvidiaDriver *struct {
		Version   string `json:"version"`
		Libraries []struct {
			Path       string `json:"path"`
			Soname     string `json:"soname"`
			SonameLink string `json:"soname_link"`
		} `json:"libraries"`
	} `json:"nvidia_driver"`
}

func readInventory(path string) (*inventory, error) {
	var inv inventory
	raw, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(raw, &inv)
	}
	return &inv, err
}

// The CSV nvidia-smi writes for --format=csv: a header row, then one row per GPU.
func readCsv(path string, columns int) ([][]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	reader := csv.NewReader(file)
	reader.TrimLeadingSpace = true
	rows, err := reader.ReadAll()
	if err == nil && (len(rows) < 1 || len(rows[0]) != columns) {
		err = fmt.Errorf("not the %d-column CSV asked for", columns)
	}
	return rows, err
}

// nvidia-smi prints bus IDs with an 8-digit domain ("00000000:18:00.0"), sysfs with 4.
func busID(text string) string {
	text = strings.ToLower(strings.TrimSpace(text))
	if len(text) > 12 {
		text = text[len(text)-12:]
	}
	return text
}

func orNone(value *string) string {
	if value == nil {
		return "(none)"
	}
	return *value
}

// compare checks every field nvidia-smi gives (pci.bus_id, uuid, name, memory.total,
// driver_version) and, when migPath is given (pci.bus_id, mig.mode.current), the MIG mode.
func compare(inventoryPath, smiPath, migPath string) bool {
	inv, err := readInventory(inventoryPath)
	if err != nil {
		fmt.Printf("inventory: FAIL (%s: %v)\n", inventoryPath, err)
		return false
	}
	rows, err := readCsv(smiPath, 5)
	if err != nil {
		fmt.Printf("nvidia-smi: FAIL (%s: %v)\n", smiPath, err)
		return false
	}
	mig := map[string]string{}
	if migPath != "" {
		migRows, err := readCsv(migPath, 2)
		if err != nil {
			fmt.Printf("nvidia-smi: FAIL (%s: %v)\n", migPath, err)
			return false
		}
		for _, row := range migRows[1:] {
			mig[busID(row[0])] = row[1]
		}
	}
	ok := true
	report := func(gpu, field, ours, theirs string) {
		if ours == theirs {
			fmt.Printf("%s %s: agree (%s)\n", gpu, field, ours)
		} else {
			fmt.Printf("%s %s: DISAGREE (tessera %s, nvidia-smi %s)\n", gpu, field, ours, theirs)
			ok = false
		}
	}
	nvidia := 0
	for _, d := range inv.Devices {
		if d.Kind == "gpu" && d.VendorID == "10de" {
			nvidia++
		}
	}
	report("host", "gpu count", strconv.Itoa(nvidia), strconv.Itoa(len(rows)-1))
	for _, row := range rows[1:] {
		gpu := busID(row[0])
		found := -1
		for i, d := range inv.Devices {
			if busID(d.PciAddress) == gpu {
				found = i
			}
		}
		if found < 0 {
			report(gpu, "pci.bus_id", "(not listed)", gpu)
			continue
		}
		d := inv.Devices[found]
		report(gpu, "pci.bus_id", busID(d.PciAddress), gpu)
		report(gpu, "uuid", orNone(d.GpuUUID), row[1])
		report(gpu, "name", orNone(d.ProductName), row[2])
		memory := "(none)"
		if d.MemoryBytes != nil {
			memory = fmt.Sprintf("%d MiB", *d.MemoryBytes>>20)
		}
		report(gpu, "memory.total", memory, row[3])
		driver := "(none)"
		if inv.NvidiaDriver != nil {
			driver = inv.NvidiaDriver.Version
		}
		report(gpu, "driver_version", driver, row[4])
		if theirs, asked := mig[gpu]; asked {
			// nvidia-smi: "Enabled", "Disabled", or "[N/A]" on boards without MIG.
			ours := "[N/A]"
			if d.Mig != nil && d.Mig.Mode != nil {
				ours = strings.ToUpper((*d.Mig.Mode)[:1]) + (*d.Mig.Mode)[1:]
			}
			report(gpu, "mig.mode.current", ours, theirs)
		}
	}
	return ok
}

// libraries prints, for each SONAME, the real file tessera found for it, and fails when it
// found none.
func libraries(inventoryPath string, sonames []string) bool {
	inv, err := readInventory(inventoryPath)
	if err != nil || inv.NvidiaDriver == nil {
		fmt.Printf("inventory: FAIL (%s: no NVIDIA driver: %v)\n", inventoryPath, err)
		return false
	}
	ok := true
	for _, soname := range sonames {
		found := ""
		for _, library := range inv.NvidiaDriver.Libraries {
			if library.Soname == soname {
				found = library.Path
			}
		}
		if found == "" {
			fmt.Printf("%s: FAIL (not found)\n", soname)
			ok = false
		} else {
			fmt.Printf("%s %s\n", soname, found)
		}
	}
	return ok
}
