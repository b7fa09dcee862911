package main

import (
	"bytes"
	"context"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/gnt-cluster/gnt/server"
)

// TestConfigDocumented: every flag `gntd agent --help` lists and every
// key of the config file appears in docs/config.md.
func TestConfigDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"gntd", "agent", "--help"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	flags := regexp.MustCompile(`(?m)^\s+(--[a-z0-9-]+)`).FindAllStringSubmatch(out.String(), -1)
	if len(flags) < 30 {
		t.Fatalf("only %d flags in gntd agent --help:\n%s", len(flags), out.String())
	}
	for _, f := range flags {
		if f[1] == "--help" {
			continue
		}
		if !bytes.Contains(doc, []byte("`"+f[1])) {
			t.Errorf("docs/config.md does not document %s", f[1])
		}
	}
	var keys []string
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			tag := strings.Split(f.Tag.Get("json"), ",")[0]
			if tag == "" || tag == "-" || !f.IsExported() {
				continue
			}
			if f.Type.Kind() == reflect.Struct && f.Type.Name() != "Duration" {
				walk(prefix+tag+".", f.Type)
				continue
			}
			keys = append(keys, prefix+tag)
		}
	}
	walk("", reflect.TypeOf(server.Config{}))
	for _, k := range keys {
		if !bytes.Contains(doc, []byte("| `"+k+"` |")) {
			t.Errorf("docs/config.md does not document the config key %s", k)
		}
	}
}
