package api_test

import (
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/gpuorch/orchestrator/api"
)

// specPath is the API reference, relative to this package.
const specPath = "../docs/openapi.yaml"

// openAPIMethods are the operation keys of an OpenAPI path item (the others, such as
// "parameters" and "summary", describe the path).
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// ginParam matches a gin path parameter (":id") or catch-all ("*path").
var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// loadSpec parses docs/openapi.yaml generically.
func loadSpec(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(specPath)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	return doc
}

// TestOpenAPIMatchesRouter: the spec's operations and the router's routes are the same set,
// method by method, so docs/openapi.yaml cannot fall behind the code (or describe a route
// that does not exist).
func TestOpenAPIMatchesRouter(t *testing.T) {
	t.Parallel()
	srv := api.New(api.Options{Logger: slog.New(slog.DiscardHandler)})
	var routes []string
	for _, r := range srv.Routes() {
		routes = append(routes, r.Method+" "+ginParam.ReplaceAllString(r.Path, "{$1}"))
	}
	require.NotEmpty(t, routes)

	doc := loadSpec(t)
	paths, ok := doc["paths"].(map[string]any)
	require.True(t, ok, "the spec has paths")
	var ops []string
	for path, item := range paths {
		m, ok := item.(map[string]any)
		require.True(t, ok, "path %s is an object", path)
		for key := range m {
			if slices.Contains(openAPIMethods, key) {
				ops = append(ops, strings.ToUpper(key)+" "+path)
			}
		}
	}
	slices.Sort(routes)
	slices.Sort(ops)
	require.Equal(t, routes, ops, "docs/openapi.yaml paths and the router's routes differ")
}

// TestOpenAPIIsComplete: every operation has an id, a summary and responses; every reference
// resolves; every path parameter is declared.
func TestOpenAPIIsComplete(t *testing.T) {
	t.Parallel()
	doc := loadSpec(t)
	require.Regexp(t, `^3\.`, doc["openapi"])
	schemas, _ := dig(doc, "components", "schemas").(map[string]any)
	require.NotEmpty(t, schemas)

	ids := map[string]string{}
	for path, item := range doc["paths"].(map[string]any) {
		for key, op := range item.(map[string]any) {
			if !slices.Contains(openAPIMethods, key) {
				continue
			}
			where := strings.ToUpper(key) + " " + path
			o := op.(map[string]any)
			id, _ := o["operationId"].(string)
			require.NotEmpty(t, id, "%s has an operationId", where)
			require.NotContains(t, ids, id, "operationId %s of %s is also %s's", id, where, ids[id])
			ids[id] = where
			require.NotEmpty(t, o["summary"], "%s has a summary", where)
			require.NotEmpty(t, o["responses"], "%s has responses", where)
			declared := map[string]bool{}
			for _, params := range []any{item.(map[string]any)["parameters"], o["parameters"]} {
				list, _ := params.([]any)
				for _, p := range list {
					pm := p.(map[string]any)
					if ref, ok := pm["$ref"].(string); ok {
						pm, _ = dig(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
					}
					if pm["in"] == "path" {
						declared[pm["name"].(string)] = true
					}
				}
			}
			for _, m := range regexp.MustCompile(`\{([^}]+)\}`).FindAllStringSubmatch(path, -1) {
				require.True(t, declared[m[1]], "%s declares its path parameter %s", where, m[1])
			}
		}
	}

	var refs []string
	collectRefs(doc, &refs)
	require.NotEmpty(t, refs)
	for _, ref := range refs {
		require.True(t, strings.HasPrefix(ref, "#/"), "only local references: %s", ref)
		require.NotNil(t, dig(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...), "reference %s resolves", ref)
	}
}

// dig follows keys through nested maps; nil when one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// collectRefs appends every "$ref" value found in v.
func collectRefs(v any, refs *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				*refs = append(*refs, s)
				continue
			}
			collectRefs(e, refs)
		}
	case []any:
		for _, e := range x {
			collectRefs(e, refs)
		}
	}
}
