package main

// The leases suite's tables and ratios.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// contendedCPU formats the CPU per attempt of a contended measurement: the
// bench (client), the coordinators and Redis, and etcd when it ran.
func contendedCPU(use cpuUse, attempts int) string {
	if attempts == 0 || use.by == nil {
		return "-"
	}
	per := func(prefix string) time.Duration {
		var d time.Duration
		for name, t := range use.by {
			if strings.HasPrefix(name, prefix) {
				d += t
			}
		}
		return d / time.Duration(attempts)
	}
	out := fmt.Sprintf("%.0fµs + %.0fµs + %.0fµs", micros(per("bench")), micros(per("coordinator")), micros(per("redis")))
	if e := per("etcd"); e >= time.Microsecond {
		out += fmt.Sprintf(" + etcd %.0fµs", micros(e))
	}
	return out
}

// printTargets prints the Go SDK rows against issue 18's targets, each a
// ratio within this one run, from the median runs at the most workers (p99
// at one worker), so that a run's verdict is read off, not worked out by
// hand.
func printTargets(env benchEnv, byKey map[string]*method, grants map[string]float64) {
	first, last := env.levels[0], env.levels[len(env.levels)-1]
	lock, etcd := byKey["redislock"], byKey["etcd-mutex"]
	if lock.na != "" || etcd.na != "" {
		return
	}
	// CPU per cycle of the bench (the client), the coordinators and Redis;
	// not of the idle peers, which every measurement also counts.
	perCycle := func(m *method, groups ...string) float64 {
		r, ok := m.median(last)
		if !ok || r.ops == 0 {
			return 0
		}
		var d time.Duration
		for name, t := range r.cpu.by {
			for _, g := range groups {
				if strings.HasPrefix(name, g) {
					d += t
				}
			}
		}
		return float64(d) / float64(r.ops)
	}
	// present reports whether the run measured the methods of keys.
	present := func(keys ...string) bool {
		for _, k := range keys {
			if m := byKey[k]; m == nil || m.na != "" {
				return false
			}
		}
		return true
	}
	echoCycles := func() float64 { return byKey["grpc-echo"].rate(last) / 2 }
	// value is the target's ratio for m; ok is false when the run cannot
	// say (p99 at one worker when 1 is not a level). bound is the same
	// figure for a service that does no store work at all, measured in
	// this run (zero: not measured): what this machine allows any gRPC
	// service of two calls a cycle, whatever its store.
	targets := []struct {
		what  string
		limit float64
		most  bool // the ratio must be at most limit (else at least)
		value func(m *method) (v float64, ok bool)
		bound func() float64
	}{
		{"Redis CPU per cycle ÷ redislock's", 1.0, true, func(m *method) (float64, bool) {
			return perCycle(m, "redis") / perCycle(lock, "redis"), true
		}, nil},
		{"client + coordinator + Redis CPU per cycle ÷ redislock's client + Redis", 2.0, true, func(m *method) (float64, bool) {
			return perCycle(m, "bench", "coordinator", "redis") / perCycle(lock, "bench", "redis"), true
		}, nil},
		{"cycles/s ÷ etcd Mutex", 3.0, false, func(m *method) (float64, bool) { return m.rate(last) / etcd.rate(last), true },
			func() float64 {
				if !present("grpc-echo") {
					return 0
				}
				return echoCycles() / etcd.rate(last)
			}},
		{"cycles/s ÷ redislock", 0.5, false, func(m *method) (float64, bool) { return m.rate(last) / lock.rate(last), true },
			func() float64 {
				if !present("grpc-echo") {
					return 0
				}
				return echoCycles() / lock.rate(last)
			}},
		{"p99 at c=1, ms", 1.0, true, func(m *method) (float64, bool) {
			r, _ := m.median(first)
			return float64(r.p99) / float64(time.Millisecond), first == 1
		}, func() float64 {
			if !present("coordinator-memory-unary") || first != 1 {
				return 0
			}
			r, _ := byKey["coordinator-memory-unary"].median(first)
			return float64(r.p99) / float64(time.Millisecond)
		}},
		{"contended grants/s ÷ etcd", 40, false, func(m *method) (float64, bool) {
			return grants[m.key] / grants["etcd-mutex"], true
		}, func() float64 {
			if !present("coordinator-memory-unary") {
				return 0
			}
			return grants["coordinator-memory-unary"] / grants["etcd-mutex"]
		}},
	}
	header := []string{fmt.Sprintf("issue 18 targets (c=%d unless said)", last), "target"}
	var sdks []*method
	for _, k := range []string{"coordinator-redis-sdk"} {
		if m := byKey[k]; m.na == "" {
			sdks = append(sdks, m)
			header = append(header, strings.TrimPrefix(m.label, "coordinator redis: Go SDK, operation stream, "))
		}
	}
	if len(sdks) == 0 {
		return
	}
	header = append(header, "no store work")
	t := table{header: header}
	for _, target := range targets {
		sign := "≥"
		if target.most {
			sign = "≤"
		}
		row := []string{target.what, fmt.Sprintf("%s %g", sign, target.limit)}
		for _, m := range sdks {
			v, ok := target.value(m)
			if !ok {
				row = append(row, "-")
				continue
			}
			mark := "missed"
			if v > 0 && !math.IsInf(v, 0) && (target.most && v <= target.limit || !target.most && v >= target.limit) {
				mark = "met"
			}
			row = append(row, fmt.Sprintf("%.2f %s", v, mark))
		}
		bound := "-"
		if target.bound != nil {
			if b := target.bound(); b > 0 && !math.IsInf(b, 0) {
				bound = fmt.Sprintf("%.2f", b)
			}
		}
		t.add(append(row, bound)...)
	}
	fmt.Println()
	t.print()
	fmt.Println("   from the median runs; CPU of the bench process (client), the coordinator and Redis only")
	fmt.Println("   no store work: the same figure, in this run, for a service of two gRPC calls a cycle that does no store work:")
	fmt.Println("   cycles/s from the gRPC echo's calls/s ÷ 2, p99 and contended grants/s from the memory store's raw unary calls")
}

// printLeases prints the uncontended table and its ratios.
func printLeases(env benchEnv, methods []*method, byKey map[string]*method, meter *cpuMeter) {
	first, last := env.levels[0], env.levels[len(env.levels)-1]
	header := []string{"method"}
	for _, n := range env.levels {
		header = append(header, fmt.Sprintf("c=%d /s", n))
	}
	header = append(header, fmt.Sprintf("p50 c=%d", first), fmt.Sprintf("p99 c=%d", first))
	if last != first {
		header = append(header, fmt.Sprintf("p50 c=%d", last), fmt.Sprintf("p99 c=%d", last))
	}
	cpuHeader := fmt.Sprintf("CPU/op c=%d: all = client + servers", last)
	header = append(header, cpuHeader, "notes")
	t := table{header: header}
	for _, m := range methods {
		row := []string{m.label}
		if m.na != "" {
			for range len(header) - 2 {
				row = append(row, "-")
			}
			t.add(append(row, m.na)...)
			continue
		}
		var notes, noted []string
		for _, n := range env.levels {
			r, _ := m.median(n)
			row = append(row, rate(r.perSecond()))
			if r.note != "" {
				noted = append(noted, fmt.Sprintf("c=%d %s", n, r.note))
			}
			errs := 0
			for _, run := range m.runs[n] {
				errs += run.errs
			}
			if errs > 0 {
				notes = append(notes, fmt.Sprintf("c=%d: %d errors (first: %v)", n, errs, r.firstErr))
			}
			all, client, servers := r.cpuPerOp()
			rec := record{Suite: "leases", Case: "uncontended", Method: m.key, Concurrency: n, PerSecond: r.perSecond(), Unit: "cycles/s",
				P50Micros: micros(r.p50), P99Micros: micros(r.p99), Errors: errs,
				CPUMicros: micros(all), ClientCPUMicros: micros(client), ServersCPUMicros: micros(servers)}
			if m.key == "grpc-echo" {
				rec.Unit = "calls/s"
			}
			extra := map[string]any{}
			if len(m.runs[n]) > 1 {
				var all []float64
				for _, run := range m.runs[n] {
					all = append(all, run.perSecond())
				}
				extra["rounds"] = all
			}
			if r.note != "" {
				extra[m.noteLabel] = r.note
			}
			if r.ops > 0 && len(r.redisCmds) > 0 {
				perOp := map[string]float64{}
				for cmd, c := range r.redisCmds {
					perOp[cmd] = float64(c) / float64(r.ops)
				}
				extra["redis_commands_per_op"] = perOp
			}
			if r.ops > 0 && len(r.cpu.by) > 0 {
				by := map[string]float64{}
				for name, d := range r.cpu.by {
					by[name] = micros(d / time.Duration(r.ops))
				}
				extra["cpu_us_by_process"] = by
			}
			if len(extra) > 0 {
				rec.Extra = extra
			}
			env.report.add(rec)
		}
		if len(noted) > 0 {
			notes = append([]string{m.noteLabel + ": " + strings.Join(noted, ", ")}, notes...)
		}
		latencyLevels := []int{first}
		if last != first {
			latencyLevels = append(latencyLevels, last)
		}
		for _, n := range latencyLevels {
			r, _ := m.median(n)
			row = append(row, dur(r.p50), dur(r.p99))
		}
		if r, _ := m.median(last); r.ops > 0 {
			all, client, servers := r.cpuPerOp()
			row = append(row, fmt.Sprintf("%s = %s + %s", dur(all), dur(client), dur(servers)))
		} else {
			row = append(row, "-")
		}
		t.add(append(row, strings.Join(notes, "; "))...)
	}
	echo := byKey["grpc-echo"]
	if echo.na == "" {
		// (The cells after the rates stay empty.)
		row := []string{"gRPC echo ÷ 2: ceiling of cycles/s"}
		for _, n := range env.levels {
			row = append(row, rate(echo.rate(n)/2))
		}
		t.add(row...)
	}
	t.print()
	fmt.Println("   a coordinator cycle is two calls (acquire, release): the echo's calls/s ÷ 2 is the most cycles/s any gRPC service can do here")
	fmt.Printf("   CPU/op: user+system time of %s (from /proc), per cycle (per call for the echo), all processes counted in every measurement\n",
		strings.Join(meter.names, ", "))

	// Where the CPU of a cycle goes, by process, at the most workers.
	fmt.Println()
	groups := []string{"bench", "coordinator", "redis", "etcd", "echo"}
	ct := table{header: append(append([]string{fmt.Sprintf("CPU per op at c=%d, by process", last)}, append(groups, "all")...), "Redis cmds/op")}
	for _, m := range methods {
		r, ok := m.median(last)
		if m.na != "" || !ok || r.ops == 0 {
			continue
		}
		by := map[string]time.Duration{}
		var all time.Duration
		for name, d := range r.cpu.by {
			g := name
			if strings.HasPrefix(name, "coordinator") {
				g = "coordinator"
			}
			by[g] += d
			all += d
		}
		row := []string{m.label}
		for _, g := range append(groups, "all") {
			d := by[g]
			if g == "all" {
				d = all
			}
			row = append(row, dur(d/time.Duration(r.ops)))
		}
		row = append(row, fmt.Sprintf("%.1f", r.redisPerOp()))
		ct.add(row...)
	}
	ct.print()
	fmt.Println("   Redis cmds/op: INFO commandstats, which counts a script and, each on its own, the commands it ran")

	// What the CPU goes to beside the work itself: counts, which stay put
	// when the machine's load moves CPU times.
	fmt.Println()
	at := table{header: append([]string{fmt.Sprintf("context switches / read+write calls per op at c=%d", last)}, append(groups, "all")...)}
	for _, m := range methods {
		r, ok := m.median(last)
		if m.na != "" || !ok || r.ops == 0 {
			continue
		}
		by := map[string]procActivity{}
		var all procActivity
		for name, a := range r.cpu.act {
			g := name
			if strings.HasPrefix(name, "coordinator") {
				g = "coordinator"
			}
			b := by[g]
			b.switches, b.syscalls = b.switches+a.switches, b.syscalls+a.syscalls
			by[g] = b
			all.switches, all.syscalls = all.switches+a.switches, all.syscalls+a.syscalls
		}
		by["all"] = all
		row := []string{m.label}
		for _, g := range append(groups, "all") {
			a := by[g]
			row = append(row, fmt.Sprintf("%.1f / %.1f", float64(a.switches)/float64(r.ops), float64(a.syscalls)/float64(r.ops)))
		}
		at.add(row...)
	}
	at.print()
	fmt.Println("   context switches of all of a process's threads (/proc/PID/task/*/status), read and write calls (/proc/PID/io syscr + syscw)")

	// How much travels together: operations per Stream message (what the
	// Redis-store coordinator received) and script calls per Redis read.
	fmt.Println()
	bt := table{header: []string{"batching, by concurrency"}}
	for _, n := range env.levels {
		bt.header = append(bt.header, fmt.Sprintf("ops/msg c=%d", n), fmt.Sprintf("results/msg c=%d", n), fmt.Sprintf("scripts/read c=%d", n), fmt.Sprintf("Ps c=%d", n))
	}
	for _, m := range methods {
		if m.na != "" || !strings.HasPrefix(m.label, "coordinator redis") {
			continue
		}
		row := []string{m.label}
		for _, n := range env.levels {
			r, ok := m.median(n)
			if !ok || r.ops == 0 {
				row = append(row, "-", "-", "-", "-")
				continue
			}
			perMsg, perResult, procs := "-", "-", "-"
			// The counts come from the Redis-store coordinator's metrics;
			// the traced rows' coordinator is another child.
			if !strings.Contains(m.key, "traced") {
				if r.procs > 0 {
					procs = fmt.Sprintf("%.0f", r.procs)
				}
				if r.streamMsgs > 0 {
					perMsg = fmt.Sprintf("%.1f", 2*float64(r.ops)/r.streamMsgs) // a cycle is two operations
				}
				if r.resultMsgs > 0 {
					perResult = fmt.Sprintf("%.1f", 2*float64(r.ops)/r.resultMsgs)
				}
			}
			row = append(row, perMsg, perResult, fmt.Sprintf("%.1f", r.scriptsPerRead()), procs)
		}
		bt.add(row...)
	}
	bt.print()
	fmt.Println("   ops/msg, results/msg: a cycle's two operations over the Stream messages the coordinator received and sent")
	fmt.Println("   (grpc_server_msg_received_total, grpc_server_msg_sent_total);")
	fmt.Println("   scripts/read: script calls over Redis read events (INFO stats total_reads_processed): calls pipelined together share one;")
	fmt.Println("   Ps: the coordinator's GOMAXPROCS at the measurement's end (go_sched_gomaxprocs_threads), sized to the CPU it uses unless -coordinator-gomaxprocs")

	// Ratios: what matters on a machine whose absolute figures wander.
	fmt.Println()
	rh := []string{"ratio of cycles/s"}
	for _, n := range env.levels {
		rh = append(rh, fmt.Sprintf("c=%d", n))
	}
	rt := table{header: rh}
	row := func(label string, num func(n int) float64, den func(n int) float64) {
		r := []string{label}
		for _, n := range env.levels {
			r = append(r, ratio(num(n), den(n)))
		}
		rt.add(r...)
	}
	redislockRate := byKey["redislock"].rate
	for _, m := range methods {
		if m.key == "redislock" || m.key == "grpc-echo" || m.na != "" {
			continue
		}
		row(m.label+" ÷ redislock", m.rate, redislockRate)
	}
	rt.rule()
	if m := byKey["coordinator-redis-semaphore"]; m.na == "" && byKey["coordinator-redis-unary"].na == "" {
		row(m.label+" ÷ the exclusive lock (raw gRPC unary)", m.rate, byKey["coordinator-redis-unary"].rate)
		rt.rule()
	}
	coordinatorRedis := []string{"coordinator-redis-sdk", "coordinator-redis-unary", "coordinator-redis-stream"}
	for _, k := range coordinatorRedis {
		if m := byKey[k]; m.na == "" {
			row(m.label+" ÷ (echo ÷ 2)", m.rate, func(n int) float64 { return echo.rate(n) / 2 })
		}
	}
	rt.rule()
	for _, k := range coordinatorRedis {
		if m := byKey[k]; m.na == "" {
			row(m.label+" ÷ etcd", m.rate, byKey["etcd-mutex"].rate)
		}
	}
	rt.print()
}

// describeRedis says which Redis the run used and how durable it is: the
// Redis peers and the coordinator's Redis store are only as durable as it.
func describeRedis(ctx context.Context, rdb *redis.Client) string {
	version := "?"
	if info, err := rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				version = v
			}
		}
	}
	conf := func(key string) string {
		m, err := rdb.ConfigGet(ctx, key).Result()
		if err != nil {
			return "?"
		}
		return fmt.Sprintf("%q", m[key])
	}
	return fmt.Sprintf("Redis %s (appendonly %s, save %s)", version, conf("appendonly"), conf("save"))
}
