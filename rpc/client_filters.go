package rpc

import (
	"context"
	"net/http"
	"net/url"
)

// Filters lists the job filter rules with every field (GET
// /2/filters?bulk=1), in the order they apply.
func (c *Client) Filters(ctx context.Context) ([]FilterRule, error) {
	var out []FilterRule
	_, err := c.Do(ctx, http.MethodGet, "/2/filters", bulkQuery(true), nil, &out)
	return out, err
}

// Filter reads one job filter rule.
func (c *Client) Filter(ctx context.Context, uuid string) (FilterRule, error) {
	var out FilterRule
	_, err := c.Do(ctx, http.MethodGet, "/2/filters/"+url.PathEscape(uuid), nil, nil, &out)
	return out, err
}

// PutFilter adds a rule (uuid "": POST /2/filters) or replaces or creates
// the rule uuid (PUT /2/filters/[uuid]) from Ganeti's body (priority,
// predicates, action, reason), and returns its UUID. dryRun only checks.
func (c *Client) PutFilter(ctx context.Context, uuid string, body map[string]any, dryRun bool) (string, error) {
	var q url.Values
	if dryRun {
		q = url.Values{"dry-run": {"1"}}
	}
	method, path := http.MethodPost, "/2/filters"
	if uuid != "" {
		method, path = http.MethodPut, "/2/filters/"+url.PathEscape(uuid)
	}
	var out string
	_, err := c.Do(ctx, method, path, q, body, &out)
	return out, err
}

// DeleteFilter removes a rule; dryRun only checks that it exists.
func (c *Client) DeleteFilter(ctx context.Context, uuid string, dryRun bool) error {
	var q url.Values
	if dryRun {
		q = url.Values{"dry-run": {"1"}}
	}
	_, err := c.Do(ctx, http.MethodDelete, "/2/filters/"+url.PathEscape(uuid), q, nil, nil)
	return err
}
