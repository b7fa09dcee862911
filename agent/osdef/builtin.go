package osdef

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// BuiltinName is the OS definition shipped with gnt (agent/osdef/gnt-image
// in the source): API 20 and 15, the variant "default", the parameter
// "label". Its create writes a 64 KiB marker at the start of the first
// disk ("GNT-IMAGE 1", the instance's name, OS, variant, reinstall flag,
// label and the script's whole environment), for guests that boot from
// kernel_path/initrd_path, for tests and for the demo.
const BuiltinName = "gnt-image"

//go:embed gnt-image
var builtin embed.FS

var builtinScripts = []string{ScriptCreate, ScriptImport, ScriptExport, ScriptRename, ScriptVerify}

// InstallBuiltin writes the shipped OS definition into dir/name (name ""
// is BuiltinName), creating dir with mode 0755: scripts 0755, other files
// 0644, so that it passes the checks when dir is owned by the gntd's user.
// Existing files are replaced.
func InstallBuiltin(dir, name string) error {
	if name == "" {
		name = BuiltinName
	}
	if err := CheckOSName(name); err != nil {
		return err
	}
	dst := filepath.Join(dir, name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("installing OS %s: %w", name, err)
	}
	for _, d := range []string{dir, dst} {
		if err := os.Chmod(d, 0o755); err != nil {
			return fmt.Errorf("installing OS %s: %w", name, err)
		}
	}
	return fs.WalkDir(builtin, BuiltinName, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := builtin.ReadFile(p)
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if slices.Contains(builtinScripts, d.Name()) {
			mode = 0o755
		}
		out := filepath.Join(dst, d.Name())
		tmp := out + ".tmp"
		if err := os.WriteFile(tmp, data, mode); err != nil {
			return fmt.Errorf("installing OS %s: %w", name, err)
		}
		if err := os.Chmod(tmp, mode); err != nil {
			return fmt.Errorf("installing OS %s: %w", name, err)
		}
		if err := os.Rename(tmp, out); err != nil {
			return fmt.Errorf("installing OS %s: %w", name, err)
		}
		return nil
	})
}
