package oob

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseOutput feeds arbitrary helper output to every command's parser:
// it must never panic, and what it accepts must be what the protocol
// allows (and survive a round trip through the result's JSON form).
func FuzzParseOutput(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{"powered": true}`, `{"powered": false, "x": 1}`, `{"powered": "yes"}`,
		`[["Ambient Temp", "OK"], ["FAN", "CRITICAL"]]`, `[["a","b","c"]]`, `[[1,"OK"]]`, `[]`,
		`{"powered": true}{"powered": true}`, "\xff\xfe", `[[["OK"]]]`, `"OK"`,
	} {
		for i := range Commands {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, cmd uint8, out []byte) {
		command := Commands[int(cmd)%len(Commands)]
		r, err := ParseOutput(command, out)
		if err != nil {
			return
		}
		if r.Command != command {
			t.Fatalf("result for %s says %s", command, r.Command)
		}
		switch command {
		case Health:
			for _, h := range r.Health {
				if !validStatus(h.Status) {
					t.Fatalf("accepted status %q", h.Status)
				}
			}
			b, err := json.Marshal(r.Payload())
			if err != nil {
				t.Fatal(err)
			}
			back, err := ParseHealth(b)
			if err != nil || len(back) != len(r.Health) {
				t.Fatalf("payload %s does not parse back: %v", b, err)
			}
		case PowerStatus:
			b, _ := json.Marshal(r.Payload())
			p, err := ParsePowerStatus(b)
			if err != nil || p != r.Powered {
				t.Fatalf("payload %s does not parse back: %v", b, err)
			}
		}
	})
}

// FuzzInterpret: any outcome gives either a result or an *Error whose
// message can be built.
func FuzzInterpret(f *testing.F) {
	f.Add(uint8(0), 0, []byte(`{"powered": true}`), []byte(""), false, false)
	f.Add(uint8(3), 1, []byte(""), []byte("bmc down"), false, false)
	f.Add(uint8(4), 2, []byte("x"), []byte("\x00"), true, false)
	f.Add(uint8(1), -1, []byte("yyyy"), []byte(""), false, true)
	f.Fuzz(func(t *testing.T, cmd uint8, exit int, stdout, stderr []byte, timedOut, flooded bool) {
		command := Commands[int(cmd)%len(Commands)]
		_, err := Interpret(command, Outcome{Exit: exit, Stdout: stdout, Stderr: stderr, TimedOut: timedOut, Flooded: flooded, Limit: 4})
		if err == nil {
			if exit != 0 || timedOut || flooded {
				t.Fatalf("success for exit %d timedOut %v flooded %v", exit, timedOut, flooded)
			}
			return
		}
		e, ok := AsError(err)
		if !ok {
			t.Fatalf("error %v is not an *Error", err)
		}
		if e.Error() == "" {
			t.Fatal("empty message")
		}
		if len(e.Error()) > 4*maxMessage+maxQuote*8 {
			t.Fatalf("unbounded message of %d bytes", len(e.Error()))
		}
	})
}

// FuzzWhitelistCheck: any path is either refused with a *RefusedError that
// quotes it, or accepted; an accepted path is absolute, clean, inside the
// directory, and resolves to a regular file inside the directory.
func FuzzWhitelistCheck(f *testing.F) {
	root, wl := programsTree(f)
	for _, s := range []string{wl.Dir + "/good", wl.Dir + "/link", wl.Dir + "/out", wl.Dir + "/../outside", "/bin/sh", "", "rel", wl.Dir + "/sub/helper", root + "/alias/good", wl.Dir + "/dirout/outside"} {
		f.Add(s)
	}
	realDir, err := filepath.EvalSymlinks(wl.Dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path string) {
		err := wl.Check(path)
		if err != nil {
			var re *RefusedError
			if !errors.As(err, &re) || re.Path != path || !strings.Contains(err.Error(), strconv.Quote(path)) {
				t.Fatalf("%q: refusal %v does not name the path", path, err)
			}
			return
		}
		if !filepath.IsAbs(path) || filepath.Clean(path) != path {
			t.Fatalf("%q accepted", path)
		}
		if _, ok := inside(wl.Dir, path); !ok {
			t.Fatalf("%q accepted outside %s", path, wl.Dir)
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			t.Fatalf("%q accepted: %v", path, err)
		}
		if _, ok := inside(realDir, real); !ok {
			t.Fatalf("%q accepted, resolves to %s outside %s", path, real, realDir)
		}
		if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("%q accepted, not a regular file: %v", path, err)
		}
	})
}
