package integration

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"
)

// MustGNT runs gnt against the cluster (GNT) and fails the test when it
// fails, with its output; it returns the output.
func (c *Cluster) MustGNT(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.GNT(args...)
	if err != nil {
		t.Fatalf("gnt %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// GetObject GETs path from the cluster's API with ?consistent=1 and
// decodes the answer, a JSON object; a failure fails the test.
func (c *Cluster) GetObject(t *testing.T, path string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out map[string]any
	if _, err := c.Client().Do(ctx, "GET", path, url.Values{"consistent": {"1"}}, nil, &out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return out
}
