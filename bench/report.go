package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// table prints rows as plain aligned text: the first column left-aligned,
// the others right-aligned.
type table struct {
	header []string
	rows   [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// rule adds an empty row, printed as a blank line.
func (t *table) rule() { t.rows = append(t.rows, nil) }

func (t *table) print() {
	widths := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, cell := range row {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i == 0 {
				b.WriteString(cell + pad)
			} else {
				b.WriteString("  " + pad + cell)
			}
		}
		fmt.Println(strings.TrimRight(b.String(), " "))
	}
	line(t.header)
	for _, row := range t.rows {
		if row == nil {
			fmt.Println()
			continue
		}
		line(row)
	}
}

func rate(perSecond float64) string {
	if perSecond <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", perSecond)
}

func dur(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// record is one measurement, as -json writes it.
type record struct {
	Suite       string  `json:"suite"`
	Case        string  `json:"case"`
	Method      string  `json:"method"`
	Concurrency int     `json:"concurrency,omitempty"`
	PerSecond   float64 `json:"per_second,omitempty"`
	Unit        string  `json:"unit,omitempty"`
	P50Micros   float64 `json:"p50_us,omitempty"`
	P99Micros   float64 `json:"p99_us,omitempty"`
	Errors      int     `json:"errors,omitempty"`
	// CPU time per operation, all processes, and its client and servers
	// parts (the leases suite).
	CPUMicros        float64        `json:"cpu_us,omitempty"`
	ClientCPUMicros  float64        `json:"client_cpu_us,omitempty"`
	ServersCPUMicros float64        `json:"servers_cpu_us,omitempty"`
	Extra            map[string]any `json:"extra,omitempty"`
}

// report collects the records of a run.
type report struct {
	mu      sync.Mutex
	records []record
}

func (r *report) add(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func (r *report) write(path string, env benchEnv) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := struct {
		Started  time.Time `json:"written"`
		GOOS     string    `json:"goos"`
		GOARCH   string    `json:"goarch"`
		CPUs     int       `json:"cpus"`
		Duration string    `json:"duration"`
		Rounds   int       `json:"rounds"`
		Records  []record  `json:"records"`
	}{time.Now().UTC(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), env.duration.String(), env.rounds, r.records}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}
