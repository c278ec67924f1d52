package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/coordinator-dev/coordinator/client"
)

// clientLevels are the concurrencies the clients suite compares: what the
// Python and TypeScript benchmarks measure.
var clientLevels = []int{1, 16}

// clientsSuite measures acquire+release cycles/s (TryLock then Release, one
// name per worker) through each language's client against one coordinator
// child on the Redis store, side by side in one run: the Go SDK in this
// process, and the Python and TypeScript clients' own benchmark programs
// (client/python/bench.py, client/typescript/bench) as child processes,
// each in both of its transports. Every figure is also given as a ratio to
// the Go SDK's (operation stream) at the same concurrency.
func clientsSuite(env benchEnv) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	coord, err := env.startCoordinator("redis")
	if err != nil {
		return err
	}
	defer coord.stop()

	rates := map[string]map[int][]float64{} // method -> concurrency -> one figure a round
	record := func(method string, c int, perSecond float64) {
		if rates[method] == nil {
			rates[method] = map[int][]float64{}
		}
		rates[method][c] = append(rates[method][c], perSecond)
	}

	tsBench, err := buildTypeScriptBench(root)
	if err != nil {
		return err
	}
	seconds := strconv.FormatFloat(env.duration.Seconds(), 'f', -1, 64)
	levels := strings.Trim(strings.ReplaceAll(fmt.Sprint(clientLevels), " ", ","), "[]")
	for round := range env.rounds {
		for _, mode := range []struct {
			method string
			opts   []client.Option
		}{
			{"go (operation stream)", nil},
		} {
			c, err := client.New(coord.addr, append(mode.opts, client.WithTTL(benchTTL), client.WithIdentity(fmt.Sprintf("bench-clients-%d", round)))...)
			if err != nil {
				return err
			}
			for _, n := range clientLevels {
				res := closedLoop(context.Background(), n, env.duration, sdkCycle(c, names(fmt.Sprintf("bench/clients/go/%d/%d/", round, n), n)))
				if res.errs > 0 {
					_ = c.Close()
					return fmt.Errorf("%s c=%d: %d errors, first: %w", mode.method, n, res.errs, res.firstErr)
				}
				record(mode.method, n, res.perSecond())
			}
			_ = c.Close()
		}
		for _, prog := range []struct {
			language string
			cmd      *exec.Cmd
		}{
			{"python", exec.Command("/usr/bin/python3", filepath.Join(root, "client/python/bench.py"), coord.addr,
				"--duration", seconds, "--concurrency", levels)},
			{"typescript", exec.Command("node", tsBench, coord.addr, seconds)},
		} {
			out, err := prog.cmd.Output()
			if err != nil {
				return fmt.Errorf("%s benchmark: %w\n%s", prog.language, err, out)
			}
			if err := parseClientBench(out, record); err != nil {
				return fmt.Errorf("%s benchmark: %w", prog.language, err)
			}
		}
	}
	printClients(rates)
	return nil
}

// buildTypeScriptBench installs client/typescript's packages from its
// lockfile when needed, compiles it, and returns its benchmark program.
func buildTypeScriptBench(root string) (string, error) {
	dir := filepath.Join(root, "client", "typescript")
	for _, args := range [][]string{{filepath.Join(root, "scripts", "npm-ci.sh"), dir}, {"npm", "run", "--silent", "build"}} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("prepare the TypeScript client (%s): %w\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "build", "bench", "bench.js"), nil
}

// clientBenchLine is a line of the Python and TypeScript benchmarks:
// "python-stream c=16 1015 cycles/s".
var clientBenchLine = regexp.MustCompile(`^(\w+)-(\w+) c=(\d+) ([\d.]+) cycles/s`)

func parseClientBench(out []byte, record func(method string, c int, perSecond float64)) error {
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := clientBenchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		c, _ := strconv.Atoi(m[3])
		rate, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			return err
		}
		transport := "unary calls"
		if m[2] == "stream" {
			transport = "operation stream"
		}
		record(fmt.Sprintf("%s (%s)", m[1], transport), c, rate)
		found++
	}
	if found == 0 {
		return fmt.Errorf("no 'cycles/s' line in its output:\n%s", out)
	}
	return nil
}

func printClients(rates map[string]map[int][]float64) {
	methods := make([]string, 0, len(rates))
	for m := range rates {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	median := func(xs []float64) float64 {
		s := append([]float64(nil), xs...)
		sort.Float64s(s)
		if len(s) == 0 {
			return 0
		}
		return s[len(s)/2]
	}
	base := rates["go (operation stream)"]
	fmt.Printf("\n== clients: acquire+release cycles/s through each language's client, one coordinator (Redis store)\n")
	fmt.Fprintf(os.Stdout, "%-28s", "client")
	for _, c := range clientLevels {
		fmt.Printf("  %9s  %7s", fmt.Sprintf("c=%d /s", c), "÷ go")
	}
	fmt.Println()
	for _, m := range methods {
		fmt.Printf("%-28s", m)
		for _, c := range clientLevels {
			r := median(rates[m][c])
			fmt.Printf("  %9.0f  %7.2f", r, r/median(base[c]))
		}
		fmt.Println()
	}
}
