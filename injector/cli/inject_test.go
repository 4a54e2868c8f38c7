package cli_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tetherproxy/tether/injector/cli"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

const testImage = "--sidecar-image=ghcr.io/tetherproxy/tether-sidecar:test"

// statusVersion is the injector's version in the status annotation; the
// goldens do not depend on the build's.
var statusVersion = regexp.MustCompile(`\\"version\\":\\"[^\\"]*\\"|"version":"[^"]*"`)

// TestInjectGolden runs `tether-injector inject` on the manifests under
// testdata/inject and compares stdout, stderr and the exit status with
// the .golden files (go test ./injector/cli -update rewrites them).
func TestInjectGolden(t *testing.T) {
	dir := filepath.Join("testdata", "inject")
	used := map[string]bool{}
	for _, c := range []struct {
		name  string
		args  []string
		stdin string // a file under testdata/inject fed to stdin
	}{
		{"workloads", []string{"-f", "workloads.yaml", testImage}, ""},
		{"list", []string{"-f", "list.json", testImage}, ""},
		{"list-chart-flags", []string{"-f", "-", testImage, "--default-store=redis", "--redis-address=redis.llm.svc:6379",
			"--native-sidecar=false", "--sidecar-prometheus-scrape", "--sidecar-memory-limit=512Mi", "--prestop-sleep=10s"}, "list.json"},
		{"opt-in", []string{"--filename", "opt-in.yaml", "--namespace-labels=", testImage}, ""},
		{"denied", []string{"-f", "denied.yaml", testImage}, ""},
		{"broken", []string{"-f", "broken.yaml", testImage}, ""},
		{"no-kind", []string{"-f", "no-kind.yaml", testImage}, ""},
		{"missing-file", []string{"-f", "nonexistent.yaml", testImage}, ""},
		{"usage-no-file", []string{testImage}, ""},
		{"usage-argument", []string{"-f", "list.json", "router.yaml"}, ""},
		{"usage-namespace-labels", []string{"-f", "list.json", "--namespace-labels=tether.dev/injection=en abled"}, ""},
		{"usage-store", []string{"-f", "list.json", "--default-store=etcd"}, ""},
	} {
		file := c.name + ".golden"
		used[file] = true
		t.Run(c.name, func(t *testing.T) {
			t.Chdir(dir)
			var stdin bytes.Buffer
			if c.stdin != "" {
				b, err := os.ReadFile(c.stdin)
				if err != nil {
					t.Fatal(err)
				}
				stdin.Write(b)
			}
			var stdout, stderr bytes.Buffer
			code, ok := cli.Main(append([]string{"inject"}, c.args...), &stdin, &stdout, &stderr)
			if !ok {
				t.Fatal("inject is not a command")
			}
			var got strings.Builder
			got.WriteString("# tether-injector inject " + strings.Join(c.args, " ") + "\n")
			got.WriteString("# exit status " + strconv.Itoa(code) + "\n")
			for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
				got.WriteString("# stderr: " + l + "\n")
			}
			got.WriteString(statusVersion.ReplaceAllStringFunc(stdout.String(), func(m string) string {
				if strings.HasPrefix(m, `\`) {
					return `\"version\":\"VERSION\"`
				}
				return `"version":"VERSION"`
			}))
			compareGolden(t, file, got.String())
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".golden") && !used[e.Name()] {
			t.Errorf("unused golden file %s: delete it or add its case", filepath.Join(dir, e.Name()))
		}
	}
}

func compareGolden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./injector/cli -update writes it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (go test ./injector/cli -update rewrites it)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code, ok := cli.Main([]string{"injct"}, nil, &out, &errb); !ok || code != 2 || !strings.Contains(errb.String(), `unknown command "injct"`) {
		t.Errorf("code %d ok %v: %s", code, ok, errb.String())
	}
	for _, args := range [][]string{nil, {"--listen=:9443"}, {"-h"}} {
		if _, ok := cli.Main(args, nil, &out, &errb); ok {
			t.Errorf("%q taken for a command: the webhook's flags must reach it", args)
		}
	}
}
