package wire_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// module is this module's path; moduleRoot is its directory, relative to this package.
const (
	module     = "github.com/gpuorch/orchestrator"
	moduleRoot = ".."
)

// moduleDeps returns the packages of this module that pkg (a path below the module, "api")
// imports, directly or not, test files excluded.
func moduleDeps(t *testing.T, pkg string) []string {
	t.Helper()
	seen := map[string]bool{}
	var walk func(rel string)
	walk = func(rel string) {
		p, err := build.ImportDir(filepath.Join(moduleRoot, rel), 0)
		require.NoError(t, err, "read package %s", rel)
		for _, imp := range p.Imports {
			sub, ok := strings.CutPrefix(imp, module+"/")
			if ok && !seen[sub] {
				seen[sub] = true
				walk(sub)
			}
		}
	}
	walk(pkg)
	deps := make([]string, 0, len(seen))
	for d := range seen {
		deps = append(deps, d)
	}
	slices.Sort(deps)
	return deps
}

// TestWireIsALeaf: wire imports the standard library only, so the API server, the worker and
// the client SDK can all depend on it without depending on each other.
func TestWireIsALeaf(t *testing.T) {
	t.Parallel()
	p, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	for _, imp := range p.Imports {
		first, _, _ := strings.Cut(imp, "/")
		require.NotContains(t, first, ".", "wire imports %s, which is not in the standard library", imp)
	}
}

// TestAPIDoesNotImportTheClient: the API server speaks the wire types, never the SDK that calls
// it, directly or through another package.
func TestAPIDoesNotImportTheClient(t *testing.T) {
	t.Parallel()
	deps := moduleDeps(t, "api")
	require.Contains(t, deps, "wire")
	require.NotContains(t, deps, "client")
}

// TestWorkerUsesTheClientForItsErrorsOnly: the worker's requests and answers are wire types;
// of the client SDK (which the worker binary hands it as its API) it names only the error
// that a failed call returns, to tell a permanent refusal from one worth retrying.
func TestWorkerUsesTheClientForItsErrorsOnly(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(moduleRoot, "worker", "*.go"))
	require.NoError(t, err)
	allowed := []string{"APIError", "IsStatus"}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		local := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"`+module+`/client"` {
				local = "client"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
				require.Contains(t, allowed, sel.Sel.Name,
					"%s names client.%s: a wire type or constant belongs to package wire", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}
