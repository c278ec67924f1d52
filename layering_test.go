package coordinator_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The module's layers, top to bottom. Every package of the module belongs to
// exactly one layer, and the non-test code of a layer imports, of this
// module, only the layers its may lists: an import of any other layer, of
// its own layer, or of a layer above it fails TestLayering. The may lists
// form no cycle, so every arrow points down. CONTRIBUTING.md's Architecture
// section draws the same layers, and .golangci.yml's depguard rules repeat
// the main "never"s for editors.
//
// A package is named by its path in the module; "x/..." is x and every
// package below it.
var layers = []layer{
	{
		name: "binaries",
		pkgs: []string{"cmd/..."},
		may:  []string{"process", "housekeeper", "housekeeper storage", "sdk", "api", "leaves"},
	},
	{
		name: "process",
		pkgs: []string{"coordinatord"},
		may:  []string{"service", "middleware", "store implementations", "store interface", "service leaves", "api", "leaves"},
	},
	{
		name:       "service",
		pkgs:       []string{"server"},
		may:        []string{"store interface", "service leaves", "api", "leaves"},
		noRedis:    true,
		testsNever: aboveTheService,
	},
	{
		name:       "middleware",
		pkgs:       []string{"server/access", "server/limits", "server/protocodec"},
		may:        []string{"service leaves", "api", "leaves"},
		noRedis:    true,
		testsNever: aboveTheService,
	},
	{
		name:       "service leaves",
		pkgs:       []string{"server/errinfo", "server/principal", "server/streamops"},
		noRedis:    true,
		testsNever: aboveTheService,
	},
	{
		name:       "store implementations",
		pkgs:       []string{"server/store/memstore", "server/store/redisstore", "server/store/storetrace"},
		may:        []string{"store interface", "leaves"},
		testsNever: aboveTheService,
	},
	{
		name:       "store interface",
		pkgs:       []string{"server/store"},
		noRedis:    true,
		testsNever: aboveTheService,
	},
	{
		name: "housekeeper",
		pkgs: []string{"housekeeper"},
		may:  []string{"housekeeper storage", "sdk", "api", "leaves"},
	},
	{
		// Deckard's MongoDB storage, as the housekeeper's storage tasks
		// read and delete it: nothing of Redis, views or schedules.
		name:    "housekeeper storage",
		pkgs:    []string{"housekeeper/storage"},
		noRedis: true,
	},
	{
		name:    "sdk",
		pkgs:    []string{"client"},
		may:     []string{"api", "leaves"},
		noRedis: true,
	},
	{
		name:    "api",
		pkgs:    []string{"gen/..."},
		noRedis: true,
	},
	{
		name: "leaves",
		pkgs: []string{"internal/app", "internal/backoff", "internal/envflag", "internal/fanout", "internal/redisurl", "internal/statefile", "internal/telemetry"},
	},

	// Test kits: code for tests, imported only by tests and by other kits
	// (no other layer lists them).
	{
		name: "process test kit",
		pkgs: []string{"coordinatord/coordtest"},
		may:  []string{"process", "test kits"},
	},
	{
		// The API calls most of the service's tests make, over any client:
		// shared by the service's tests and the process's.
		name:       "service test kit",
		pkgs:       []string{"server/servertest"},
		may:        []string{"api"},
		testsNever: aboveTheService,
	},
	{
		name:       "store test kit",
		pkgs:       []string{"server/store/storetest", "server/store/storemodel"},
		may:        []string{"store interface", "test kits"},
		testsNever: aboveTheService,
	},
	{
		name: "housekeeper test kit",
		pkgs: []string{"housekeeper/housekeepertest"},
		may:  []string{"housekeeper", "sdk", "api", "leaves", "test kits"},
	},
	{
		name: "test kits",
		pkgs: []string{"internal/testkit/..."},
	},

	// The deployment artifacts' checks: a package of tests (its one file of
	// code, doc.go, imports nothing), which run the binaries and may use
	// the test kits.
	{
		name: "deployment checks",
		pkgs: []string{"deploy"},
	},
}

// aboveTheService is what the tests of the service, its middleware and its
// stores never import: they test their own layer, not the process built on
// it (its tests are in coordinatord).
var aboveTheService = []string{"binaries", "process", "process test kit"}

type layer struct {
	name string
	pkgs []string
	may  []string
	// noRedis forbids importing go-redis: only the Redis store, the process
	// that opens it, the housekeeper (Deckard's Redis) and the leaves that
	// set go-redis up know about Redis.
	noRedis bool
	// testsNever lists layers that even this layer's tests never import.
	testsNever []string
}

const (
	module  = "github.com/coordinator-dev/coordinator"
	goRedis = "github.com/redis/go-redis"
)

// goFile is one Go file of the module with its imports.
type goFile struct {
	path    string // relative to the module root, slash-separated
	pkg     string // its package's path in the module ("" for the root)
	test    bool
	imports []string
}

func TestLayering(t *testing.T) {
	byName := map[string]*layer{}
	for i := range layers {
		l := &layers[i]
		if byName[l.name] != nil {
			t.Fatalf("two layers are named %q", l.name)
		}
		byName[l.name] = l
	}
	for _, l := range layers {
		for _, m := range append(slices.Clone(l.may), l.testsNever...) {
			if byName[m] == nil {
				t.Fatalf("layer %q names %q, which is no layer", l.name, m)
			}
		}
	}
	if cycle := findCycle(byName); cycle != nil {
		t.Fatalf("the layers' may lists form a cycle: %s", strings.Join(cycle, " -> "))
	}

	files := moduleFiles(t)
	for _, f := range files {
		if f.pkg == "" {
			if !f.test {
				t.Errorf("%s: the module root holds no package but this test; put code in a layer's folder", f.path)
			}
			continue
		}
		from := layerOf(f.pkg)
		if from == nil {
			t.Errorf("%s: package %s is in no layer; add it to layers in layering_test.go and to %s's Architecture", f.path, f.pkg, architectureDoc)
			continue
		}
		for _, imp := range f.imports {
			if !f.test && from.noRedis && (imp == goRedis || strings.HasPrefix(imp, goRedis+"/")) {
				t.Errorf("%s imports %s: the %s layer knows nothing of Redis", f.path, imp, from.name)
			}
			rel, ours := strings.CutPrefix(imp, module+"/")
			if !ours {
				continue
			}
			if rel == f.pkg {
				continue // an external test of its own package
			}
			to := layerOf(rel)
			switch {
			case to == nil:
				// Reported for the package's own files.
			case f.test:
				if slices.Contains(from.testsNever, to.name) {
					t.Errorf("%s imports %s: tests of the %s layer never import the %s layer above it", f.path, rel, from.name, to.name)
				}
			case !slices.Contains(from.may, to.name):
				may := "nothing of this module"
				if len(from.may) > 0 {
					may = "only " + strings.Join(from.may, ", ")
				}
				t.Errorf("%s imports %s (%s): the %s layer may import %s", f.path, rel, to.name, from.name, may)
			}
		}
	}
}

// TestArchitectureMatchesTheTree checks that CONTRIBUTING.md's
// Architecture block lists every package of the module, and only folders
// that exist.
func TestArchitectureMatchesTheTree(t *testing.T) {
	listed := architectureFolders(t)
	for _, f := range moduleFiles(t) {
		if f.pkg != "" && !listed[f.pkg] {
			t.Errorf("%s's Architecture lists no %s/ (package of %s)", architectureDoc, f.pkg, f.path)
			listed[f.pkg] = true // once a package
		}
	}
	for dir := range listed {
		if st, err := os.Stat(filepath.FromSlash(dir)); err != nil || !st.IsDir() {
			t.Errorf("%s's Architecture lists %s/, which is no folder", architectureDoc, dir)
		}
	}
}

// architectureDoc is the document whose Architecture section draws the
// layers.
const architectureDoc = "CONTRIBUTING.md"

// architectureFolders returns the folders architectureDoc's Architecture
// block names: the first word of each line, indented ones relative to the
// line above them with less indentation.
func architectureFolders(t *testing.T) map[string]bool {
	t.Helper()
	readme, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	folders := map[string]bool{}
	var section, inBlock bool
	var parents []string // parents[i] is the last folder at indentation 2i
	sc := bufio.NewScanner(bytes.NewReader(readme))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section = line == "## Architecture"
			continue
		case !section:
			continue
		case strings.HasPrefix(line, "```"):
			if inBlock {
				return folders
			}
			inBlock = true
			continue
		case !inBlock || strings.TrimSpace(line) == "":
			continue
		}
		word := strings.Fields(line)[0]
		depth := (len(line) - len(strings.TrimLeft(line, " "))) / 2
		if depth > len(parents) {
			t.Fatalf("%s's Architecture: %q is indented deeper than the line above", architectureDoc, line)
		}
		dir := strings.TrimSuffix(word, "/")
		if depth > 0 {
			dir = parents[depth-1] + "/" + dir
		}
		parents = append(parents[:depth], dir)
		folders[dir] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatal(architectureDoc + " has no ## Architecture section with a ``` block")
	return nil
}

// layerOf returns the layer of the package at rel, or nil.
func layerOf(rel string) *layer {
	for i := range layers {
		for _, p := range layers[i].pkgs {
			if base, tree := strings.CutSuffix(p, "/..."); tree && (rel == base || strings.HasPrefix(rel, base+"/")) || p == rel {
				return &layers[i]
			}
		}
	}
	return nil
}

// moduleFiles parses the imports of every Go file of the module, whatever
// its build constraints, leaving out other modules nested in it (bench,
// tools) and what is not Go source (testdata, node_modules, dot folders).
func moduleFiles(t *testing.T) []goFile {
	t.Helper()
	var files []goFile
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == "." {
				return nil
			}
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		parsed, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		f := goFile{path: filepath.ToSlash(path), test: strings.HasSuffix(name, "_test.go")}
		if dir := filepath.ToSlash(filepath.Dir(path)); dir != "." {
			f.pkg = dir
		}
		for _, spec := range parsed.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			f.imports = append(f.imports, imp)
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("found no Go files: run the test from the module root")
	}
	return files
}

// findCycle returns a cycle of may lists, or nil.
func findCycle(byName map[string]*layer) []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(name string) []string
	visit = func(name string) []string {
		switch state[name] {
		case onPath:
			return append(slices.Clone(path[slices.Index(path, name):]), name)
		case done:
			return nil
		}
		state[name] = onPath
		path = append(path, name)
		for _, m := range byName[name].may {
			if c := visit(m); c != nil {
				return c
			}
		}
		path = path[:len(path)-1]
		state[name] = done
		return nil
	}
	for _, l := range layers {
		if c := visit(l.name); c != nil {
			return c
		}
	}
	return nil
}
