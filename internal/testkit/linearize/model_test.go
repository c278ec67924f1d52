package linearize

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ttl = time.Second

// op is an operation on "n" called at call and returned at ret
// milliseconds; ret < 0 leaves its outcome unknown.
type op struct {
	in  Input
	out Output
}

func grant(holder string, token uint64, weight int64, call, ret int) op {
	return op{in: Input{Kind: Acquire, Holder: holder, Weight: weight, Call: ms(call), Return: ms(ret)}, out: Output{Outcome: Granted, Token: token, Weight: weight}}
}

// shortGrant is a grant answered with a TTL of a fifth of the one asked.
func shortGrant(holder string, token uint64, call, ret int) op {
	o := grant(holder, token, 1, call, ret)
	o.out.TTL = ttl / 5
	return o
}

func refuse(holder string, call, ret int) op {
	return op{in: Input{Kind: Acquire, Holder: holder, Weight: 1, Call: ms(call), Return: ms(ret)}, out: Output{Outcome: Refused}}
}

// unknownAcquire never answered.
func unknownAcquire(holder string, call int) op {
	return op{in: Input{Kind: Acquire, Holder: holder, Weight: 1, Call: ms(call)}, out: Output{Outcome: Unknown}}
}

func release(holder string, token uint64, call, ret int) op {
	return op{in: Input{Kind: Release, Holder: holder, Token: token, Call: ms(call), Return: ms(ret)}, out: Output{Outcome: Released, Released: true}}
}

func unknownRelease(holder string, token uint64, call int) op {
	return op{in: Input{Kind: Release, Holder: holder, Token: token, Call: ms(call)}, out: Output{Outcome: Unknown}}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func history(capacity int64, ops []op) []porcupine.Operation {
	var h []porcupine.Operation
	for i, o := range ops {
		o.in.Name, o.in.Capacity, o.in.TTL = "n", capacity, ttl
		ret := int64(math.MaxInt64)
		if o.out.Outcome != Unknown {
			ret = int64(o.in.Return)
		}
		h = append(h, porcupine.Operation{ClientId: i, Input: o.in, Call: int64(o.in.Call), Output: o.out, Return: ret})
	}
	return h
}

func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int64
		ops      []op
		legal    bool
	}{
		{"one holder after another, released", 1, []op{grant("a", 1, 1, 0, 10), release("a", 1, 20, 30), grant("b", 2, 1, 40, 50)}, true},
		{"two holders overlapping", 1, []op{grant("a", 1, 1, 0, 10), grant("b", 2, 1, 100, 110)}, false},
		{"a release that answered after the next grant", 1, []op{grant("a", 1, 1, 0, 10), release("a", 1, 20, 60), grant("b", 2, 1, 40, 50)}, true},
		{"a release called after the next grant returned", 1, []op{grant("a", 1, 1, 0, 10), grant("b", 2, 1, 40, 50), release("a", 1, 60, 70)}, false},
		{"a token going back", 1, []op{grant("a", 5, 1, 0, 10), release("a", 5, 20, 30), grant("b", 3, 1, 40, 50)}, false},
		{"the same token to another holder", 1, []op{grant("a", 5, 1, 0, 10), release("a", 5, 20, 30), grant("b", 5, 1, 40, 50)}, false},
		{"tokens ordered by overlapping grants", 4, []op{grant("a", 2, 1, 0, 100), grant("b", 1, 1, 50, 150)}, true},
		{"tokens against the real-time order", 4, []op{grant("a", 2, 1, 0, 10), grant("b", 1, 1, 50, 60)}, false},
		{"a grant once the lease could have expired", 1, []op{grant("a", 1, 1, 0, 10), grant("b", 2, 1, 890, 900)}, true},
		{"a grant before the lease could have expired", 1, []op{grant("a", 1, 1, 0, 10), grant("b", 2, 1, 500, 600)}, false},
		{"a grant after the TTL answered, shorter than asked", 1, []op{shortGrant("a", 1, 0, 10), grant("b", 2, 1, 150, 160)}, true},
		{"a grant before the TTL answered, shorter than asked", 1, []op{shortGrant("a", 1, 0, 10), grant("b", 2, 1, 50, 60)}, false},
		{"a renewal keeps the token", 1, []op{grant("a", 1, 1, 0, 10), grant("a", 1, 1, 500, 510), release("a", 1, 600, 610), grant("b", 2, 1, 700, 710)}, true},
		{"a renewal runs its TTL from its call", 1, []op{grant("a", 1, 1, 0, 10), grant("a", 1, 1, 800, 810), grant("b", 2, 1, 1200, 1210)}, false},
		{"after a renewal's TTL", 1, []op{grant("a", 1, 1, 0, 10), grant("a", 1, 1, 800, 810), grant("b", 2, 1, 1700, 1710)}, true},
		{"a refusal changes nothing", 1, []op{grant("a", 1, 1, 0, 10), refuse("b", 20, 30), release("a", 1, 40, 50), grant("b", 2, 1, 60, 70)}, true},
		{"an unknown acquisition may have granted nothing", 1, []op{unknownAcquire("a", 0), grant("b", 2, 1, 40, 50)}, true},
		{"an unknown acquisition does not hide an overlap", 1, []op{grant("a", 1, 1, 0, 10), unknownAcquire("c", 20), grant("b", 3, 1, 40, 50)}, false},
		{"an unknown release may have released", 1, []op{grant("a", 1, 1, 0, 10), unknownRelease("a", 1, 20), grant("b", 2, 1, 40, 50)}, true},
		{"an unknown release called after the next grant", 1, []op{grant("a", 1, 1, 0, 10), grant("b", 2, 1, 40, 50), unknownRelease("a", 1, 60)}, false},
		{"a semaphore's weights fit", 4, []op{grant("a", 1, 2, 0, 10), grant("b", 2, 1, 20, 30), grant("c", 3, 1, 40, 50)}, true},
		{"a semaphore's weights past its capacity", 4, []op{grant("a", 1, 2, 0, 10), grant("b", 2, 2, 20, 30), grant("c", 3, 1, 40, 50)}, false},
		{"an exclusive grant beside a holder", 4, []op{grant("a", 1, 1, 0, 10), grant("b", 2, 4, 20, 30)}, false},
		{"an exclusive grant after a release", 4, []op{grant("a", 1, 1, 0, 10), release("a", 1, 15, 18), grant("b", 2, 4, 20, 30)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, info := porcupine.CheckOperationsVerbose(Model(), history(tc.capacity, tc.ops), 10*time.Second)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; res != want {
				t.Errorf("check: %v, want %v", res, want)
			}
			// The visualization replays the model: it must hold on both.
			if err := porcupine.Visualize(Model(), info, &strings.Builder{}); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestRecorder(t *testing.T) {
	var r Recorder
	a := r.Acquire("n", "a", 1, 1, ttl)
	a.Granted(7, 1, 0)
	r.Acquire("n", "b", 1, 1, ttl) // never answered
	rel := r.Release("n", "a", 7)
	rel.Released(true)
	r.Acquire("m", "b", 1, 1, ttl).Failed()

	ops := r.Operations()
	if len(ops) != 4 {
		t.Fatalf("%d operations, want 4", len(ops))
	}
	if got := ops[0].Output.(Output); got.Outcome != Granted || got.Token != 7 || ops[0].Return < ops[0].Call {
		t.Errorf("grant recorded as %+v [%d, %d]", got, ops[0].Call, ops[0].Return)
	}
	for _, i := range []int{1, 3} {
		if ops[i].Return != math.MaxInt64 || ops[i].Output.(Output).Outcome != Unknown {
			t.Errorf("operation %d, whose outcome is unknown, recorded as %+v returning at %d", i, ops[i].Output, ops[i].Return)
		}
	}
	if ops[0].ClientId == ops[1].ClientId || ops[1].ClientId != ops[3].ClientId {
		t.Errorf("clients %d, %d, %d: want one per holder", ops[0].ClientId, ops[1].ClientId, ops[3].ClientId)
	}
	verdicts := Verify(&r, 10*time.Second)
	if len(verdicts) != 2 || verdicts[0].Name != "n" || verdicts[0].Operations != 3 || verdicts[1].Name != "m" {
		t.Fatalf("%d verdicts: want n's 3 operations, then m's", len(verdicts))
	}
	for _, v := range verdicts {
		if v.Result != porcupine.Ok {
			t.Errorf("%s: %v, want legal", v.Name, v.Result)
		}
	}
}

// TestVerifyIllegalAmongFailures checks that failed and refused
// acquisitions, as many as a fault leaves, do not keep an illegal history
// from being found illegal at once.
func TestVerifyIllegalAmongFailures(t *testing.T) {
	var r Recorder
	for i := range 300 {
		c := r.Acquire("n", "c", 1, 1, ttl)
		if i%2 == 0 {
			c.Failed()
		} else {
			c.Refused()
		}
		r.Acquire("n", "d", 1, 1, ttl) // never answered
	}
	r.Acquire("n", "a", 1, 1, ttl).Granted(1, 1, 0)
	r.Release("n", "a", 1) // never answered: it may have released
	r.Acquire("n", "b", 1, 1, ttl).Granted(3, 1, 0)
	r.Acquire("n", "b", 1, 1, ttl).Granted(2, 1, 0)
	verdicts := Verify(&r, 30*time.Second)
	if len(verdicts) != 1 || verdicts[0].Result != porcupine.Illegal {
		t.Fatalf("%d verdicts, the first %v: want one, illegal", len(verdicts), verdicts[0].Result)
	}
	if v := verdicts[0]; v.Operations != 604 || v.Unknown != 451 || v.Grants != 3 || v.Checked != 4 {
		t.Errorf("counted %d operations, %d unknown, %d grants, %d checked; want 604, 451, 3, 4", v.Operations, v.Unknown, v.Grants, v.Checked)
	}
}

// TestVerifyIllegal checks that an illegal history is explained and
// visualized where HistoryDirEnv says.
func TestVerifyIllegal(t *testing.T) {
	var r Recorder
	r.Acquire("locks/x", "a", 1, 1, ttl).Granted(1, 1, 0)
	r.Acquire("locks/x", "b", 1, 1, ttl).Granted(2, 1, 0)
	verdicts := Verify(&r, 10*time.Second)
	if len(verdicts) != 1 || verdicts[0].Result != porcupine.Illegal || verdicts[0].Grants != 2 || verdicts[0].Unknown != 0 {
		t.Fatalf("%d verdicts, the first %v with %d grants, %d unknown: want one, illegal, with 2 grants", len(verdicts), verdicts[0].Result, verdicts[0].Grants, verdicts[0].Unknown)
	}
	if !strings.Contains(verdicts[0].Illegal, "left out: acquire(locks/x, b,") {
		t.Errorf("explanation %q does not name b's grant", verdicts[0].Illegal)
	}
	dir := t.TempDir()
	t.Setenv(HistoryDirEnv, dir)
	path, err := visualize(verdicts[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(path, dir) || strings.Count(path, "/") != strings.Count(dir, "/")+1 {
		t.Errorf("visualization written to %s, want a file in %s", path, dir)
	}
	if html, err := os.ReadFile(path); err != nil || !strings.Contains(string(html), "<html") {
		t.Errorf("visualization %s: %v, %.80q", path, err, html)
	}
}
