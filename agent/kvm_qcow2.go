package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gnt-cluster/gnt/fsm"
)

// Disk image formats of the kvm driver's file disks. A disk's file name
// says its format: <disk uuid>.img is raw, <disk uuid>.qcow2 is qcow2. A
// new disk takes the format of its template's filled disk parameter
// format (fsm: file and sharedfile, default raw); an existing one keeps
// the format it was created with, whatever the parameter says later.

// diskExt are the file name endings of the formats.
var diskExt = map[string]string{fsm.DiskFormatRaw: ".img", fsm.DiskFormatQcow2: ".qcow2"}

// diskFileFormat is the format of a disk file by its name.
func diskFileFormat(path string) string {
	if strings.HasSuffix(path, diskExt[fsm.DiskFormatQcow2]) {
		return fsm.DiskFormatQcow2
	}
	return fsm.DiskFormatRaw
}

// newDiskFormat is the format new disks of the instance get: its filled
// disk parameter format (raw when absent).
func newDiskFormat(inst fsm.Instance) (string, error) {
	v, ok := inst.DiskParams["format"]
	if !ok {
		return fsm.DiskFormatRaw, nil
	}
	s, _ := v.(string)
	if _, known := diskExt[s]; !known {
		return "", invalid("disk parameter format %v of instance %s: want raw or qcow2", v, inst.Name)
	}
	return s, nil
}

// qcow2HeaderLen is what qcow2Size reads of a file: the magic, the
// version and the virtual size (bytes 24..31, big-endian).
const qcow2HeaderLen = 32

// qcow2Size reads the virtual size in bytes from a qcow2 header.
func qcow2Size(h []byte) (int64, error) {
	if len(h) < qcow2HeaderLen {
		return 0, fmt.Errorf("qcow2 header of %d bytes, want %d", len(h), qcow2HeaderLen)
	}
	if string(h[:4]) != "QFI\xfb" {
		return 0, errors.New("not a qcow2 image (bad magic)")
	}
	if v := binary.BigEndian.Uint32(h[4:8]); v != 2 && v != 3 {
		return 0, fmt.Errorf("qcow2 version %d, want 2 or 3", v)
	}
	size := binary.BigEndian.Uint64(h[24:32])
	if size > uint64(fsm.MaxDiskSizeMiB)<<20 {
		return 0, fmt.Errorf("qcow2 virtual size %d bytes, over the limit of %d MiB", size, fsm.MaxDiskSizeMiB)
	}
	return int64(size), nil
}

// qcow2FileSize is the virtual size in bytes of a qcow2 file.
func qcow2FileSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := make([]byte, qcow2HeaderLen)
	if _, err := io.ReadFull(f, h); err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	n, err := qcow2Size(h)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}
