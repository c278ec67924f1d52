package linearize

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// CheckTimeout bounds porcupine's search of one name's history.
const CheckTimeout = time.Minute

// HistoryDirEnv names the directory an illegal history's visualization is
// written to (a new temporary directory when unset).
const HistoryDirEnv = "COORDINATOR_HISTORY_DIR"

// Verdict is the check of one name's history.
type Verdict struct {
	Name string
	// Operations is how many operations the history holds, Grants how
	// many of them were granted, Unknown how many have unknown outcomes,
	// and Checked how many porcupine was given: all but those that change
	// nothing (see changesNothing).
	Operations, Grants, Unknown, Checked int
	Result                               porcupine.CheckResult
	Took                                 time.Duration
	// Illegal, for an illegal history, describes the operations porcupine
	// linearized at most, and those it could not place next.
	Illegal string
	info    porcupine.LinearizationInfo
}

// Verify checks each name's history, each within timeout, in the order of
// the names' first operation.
func Verify(r *Recorder, timeout time.Duration) []Verdict {
	model := Model()
	var verdicts []Verdict
	for _, part := range partitionByName(r.Operations()) {
		v := Verdict{Name: part[0].Input.(Input).Name, Operations: len(part)}
		for _, op := range part {
			switch op.Output.(Output).Outcome {
			case Granted:
				v.Grants++
			case Unknown:
				v.Unknown++
			}
		}
		part = slices.DeleteFunc(part, changesNothing)
		v.Checked = len(part)
		start := time.Now()
		v.Result, v.info = porcupine.CheckOperationsVerbose(model, part, timeout)
		v.Took = time.Since(start)
		if v.Result == porcupine.Illegal {
			v.Illegal = explain(model, part, v.info)
		}
		verdicts = append(verdicts, v)
	}
	return verdicts
}

// explain describes the longest prefix porcupine could linearize, and the
// operations called earliest that it left out: the first that no
// linearization could take next is among them.
func explain(model porcupine.Model, part []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []int // indexes in part
	for _, partials := range info.PartialLinearizations() {
		for _, p := range partials {
			if len(p) > len(longest) {
				longest = p
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "porcupine linearized at most %d of %d operations", len(longest), len(part))
	if n := len(longest); n > 0 {
		last := part[longest[n-1]]
		fmt.Fprintf(&b, "; the last of them: %s", model.DescribeOperation(last.Input, last.Output))
	}
	rest := make([]int, 0, len(part))
	for i := range part {
		if !slices.Contains(longest, i) {
			rest = append(rest, i)
		}
	}
	slices.SortStableFunc(rest, func(i, j int) int { return cmp.Compare(part[i].Call, part[j].Call) })
	for _, i := range rest[:min(3, len(rest))] {
		fmt.Fprintf(&b, "\n  left out: %s", model.DescribeOperation(part[i].Input, part[i].Output))
	}
	return b.String()
}

// Check verifies r's history of each name and fails t on an illegal one,
// with porcupine's visualization of it written to a file it names. A
// history porcupine could not decide within CheckTimeout is logged, not
// failed.
func Check(t testing.TB, r *Recorder) {
	t.Helper()
	ops, grants, unknown, checked, undecided := 0, 0, 0, 0, 0
	var took time.Duration
	for _, v := range Verify(r, CheckTimeout) {
		ops, grants, unknown, checked = ops+v.Operations, grants+v.Grants, unknown+v.Unknown, checked+v.Checked
		took += v.Took
		switch v.Result {
		case porcupine.Unknown:
			undecided++
			t.Logf("linearizability of %s (%d operations): undecided after %s", v.Name, v.Operations, CheckTimeout)
		case porcupine.Illegal:
			path, err := visualize(v)
			if err != nil {
				path = fmt.Sprintf("(not written: %v)", err)
			}
			t.Errorf("the history of %s (%d operations) is not linearizable as a lease with fencing: %s\nvisualization: %s", v.Name, v.Operations, v.Illegal, path)
		}
	}
	t.Logf("linearizability: %d operations (%d grants, %d of unknown outcome), %d of them checked (grants and releases) in %s, %d names undecided",
		ops, grants, unknown, checked, took.Round(time.Millisecond), undecided)
}

// visualize writes v's visualization to a new file in $COORDINATOR_HISTORY_DIR,
// or a new temporary directory, and returns its path.
func visualize(v Verdict) (string, error) {
	dir := os.Getenv(HistoryDirEnv)
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "linearize-"); err != nil {
			return "", err
		}
	}
	f, err := os.CreateTemp(dir, strings.NewReplacer("/", "_", string(filepath.Separator), "_").Replace(v.Name)+"-*.html")
	if err != nil {
		return "", err
	}
	if err := porcupine.Visualize(Model(), v.info, f); err != nil {
		_ = f.Close()
		return "", fmt.Errorf("visualizing %s: %w", v.Name, err)
	}
	return f.Name(), f.Close()
}
