package main

// The groups suite's tables, ratios and targets.

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// us formats a CPU time per operation in microseconds, with a decimal
// below 10 µs (a group of 8's share per name is a few µs).
func us(d time.Duration) string {
	v := micros(d)
	switch {
	case d <= 0:
		return "-"
	case v < 10:
		return fmt.Sprintf("%.1fµs", v)
	default:
		return fmt.Sprintf("%.0fµs", v)
	}
}

// processCPU is a measurement's CPU per operation of the client (the
// bench), the store's coordinator and its Redis (0 for the memory store).
func processCPU(use cpuUse, s *groupStore, ops int) (client, coord, redis time.Duration) {
	if ops == 0 || use.by == nil {
		return 0, 0, 0
	}
	n := time.Duration(ops)
	client, coord = use.by["bench"]/n, use.by[s.coordProc]/n
	if s.redisProc != "" {
		redis = use.by[s.redisProc] / n
	}
	return client, coord, redis
}

// singleOf is the single-name row of the store of r.
func singleOf(rows []*groupRow, r *groupRow) *groupRow {
	for _, o := range rows {
		if o.store == r.store && o.size == 1 {
			return o
		}
	}
	return nil
}

// printGroupCycles prints the uncontended rates, then the CPU of a cycle
// and of a name, by process, at the most workers.
func printGroupCycles(env benchEnv, rows []*groupRow) {
	first, last := env.levels[0], env.levels[len(env.levels)-1]
	header := []string{"cycle"}
	for _, n := range env.levels {
		header = append(header, fmt.Sprintf("c=%d /s", n))
	}
	header = append(header, fmt.Sprintf("names/s c=%d", last), fmt.Sprintf("p50 c=%d", first), fmt.Sprintf("p99 c=%d", first))
	if last != first {
		header = append(header, fmt.Sprintf("p50 c=%d", last), fmt.Sprintf("p99 c=%d", last))
	}
	header = append(header, "notes")
	t := table{header: header}
	for i, r := range rows {
		if i > 0 && rows[i-1].store != r.store {
			t.rule()
		}
		row := []string{r.label}
		if r.na != "" {
			for range len(header) - 2 {
				row = append(row, "-")
			}
			t.add(append(row, r.na)...)
			continue
		}
		var notes []string
		for _, n := range env.levels {
			m, _ := r.median(n)
			row = append(row, rate(m.perSecond()))
			errs := 0
			for _, run := range r.runs[n] {
				errs += run.errs
			}
			if errs > 0 {
				notes = append(notes, fmt.Sprintf("c=%d: %d errors (first: %v)", n, errs, m.firstErr))
			}
			recordGroupCycle(env, r, n, m, errs)
		}
		row = append(row, rate(r.rate(last)*float64(r.size)))
		levels := []int{first}
		if last != first {
			levels = append(levels, last)
		}
		for _, n := range levels {
			m, _ := r.median(n)
			row = append(row, dur(m.p50), dur(m.p99))
		}
		t.add(append(row, strings.Join(notes, "; "))...)
	}
	t.print()
	fmt.Println("   a cycle: acquire + release of one name, or acquire_group + release_group of a group's names; names/s: cycles/s × names")

	fmt.Println()
	ct := table{header: []string{fmt.Sprintf("CPU at c=%d, by process", last), "per cycle: client + coordinator + Redis = all",
		"per name: client + coordinator + Redis", "Redis cmds/cycle", "Redis cmds/name", "Redis CPU/name ÷ single cycle's"}}
	for i, r := range rows {
		if i > 0 && rows[i-1].store != r.store {
			ct.rule()
		}
		m, ok := r.median(last)
		if r.na != "" || !ok || m.ops == 0 {
			continue
		}
		client, coord, redis := processCPU(m.cpu, r.store, m.ops)
		k := time.Duration(r.size)
		cmds, cmdsPerName, vsSingle := "-", "-", "-"
		if r.store.redisProc != "" {
			cmds = fmt.Sprintf("%.1f", m.redisPerOp())
			cmdsPerName = fmt.Sprintf("%.1f", m.redisPerOp()/float64(r.size))
			vsSingle = ratioCell(redisPerNameRatio(rows, r, last))
		}
		ct.add(r.label,
			fmt.Sprintf("%s + %s + %s = %s", us(client), us(coord), us(redis), us(client+coord+redis)),
			fmt.Sprintf("%s + %s + %s", us(client/k), us(coord/k), us(redis/k)),
			cmds, cmdsPerName, vsSingle)
	}
	ct.print()
	fmt.Println("   user+system time (/proc) of the bench process (the client), the row's coordinator and its Redis (the Cluster's three")
	fmt.Println("   nodes together); Redis cmds: INFO commandstats of that Redis, a script and each command it ran")
}

// redisPerNameRatio is r's Redis CPU per name over its store's single-name
// cycle's Redis CPU per cycle at n workers (issue 37's cost target); 0 when
// the run cannot say.
func redisPerNameRatio(rows []*groupRow, r *groupRow, n int) float64 {
	single := singleOf(rows, r)
	if single == nil || single.na != "" || r.na != "" || r.store.redisProc == "" {
		return 0
	}
	m, ok1 := r.median(n)
	s, ok2 := single.median(n)
	if !ok1 || !ok2 || m.ops == 0 || s.ops == 0 {
		return 0
	}
	_, _, redis := processCPU(m.cpu, r.store, m.ops)
	_, _, singleRedis := processCPU(s.cpu, single.store, s.ops)
	if singleRedis == 0 {
		return 0
	}
	return float64(redis) / float64(r.size) / float64(singleRedis)
}

// ratioCell formats a ratio; "-" when the run could not measure it.
func ratioCell(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func recordGroupCycle(env benchEnv, r *groupRow, n int, m measured, errs int) {
	client, coord, redis := processCPU(m.cpu, r.store, m.ops)
	extra := map[string]any{
		"names": r.size, "store": r.store.key,
		"cpu_us_by_process": map[string]float64{"client": micros(client), "coordinator": micros(coord), "redis": micros(redis)},
	}
	if r.store.redisProc != "" {
		extra["redis_commands_per_op"] = m.redisPerOp()
	}
	if len(r.runs[n]) > 1 {
		var all []float64
		for _, run := range r.runs[n] {
			all = append(all, run.perSecond())
		}
		extra["rounds"] = all
	}
	env.report.add(record{Suite: "groups", Case: "uncontended", Method: r.key, Concurrency: n, PerSecond: m.perSecond(), Unit: "cycles/s",
		P50Micros: micros(m.p50), P99Micros: micros(m.p99), Errors: errs,
		CPUMicros: micros(client + coord + redis), ClientCPUMicros: micros(client), ServersCPUMicros: micros(coord + redis), Extra: extra})
}

// printContendedGroups prints the contended runs and returns, for each
// run that shows a deadlock or a stall, what it shows.
func printContendedGroups(env benchEnv, rows []*contendedRow) []string {
	t := table{header: []string{"contended", "grants/s", "names/s", "attempts", "waits run out", "errors",
		"grants a client: min / median / max", "time to grant: p50 / p99 / longest", "CPU/grant: client + coordinator + Redis", "refused attempts/grant", "Redis scripts / cmds per grant", "notes"}}
	var stalls, stallNotes []string
	for i, r := range rows {
		if i > 0 && rows[i-1].store != r.store {
			t.rule()
		}
		if r.na != "" {
			t.add(r.label(), "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", r.na)
			continue
		}
		w, _ := r.median()
		names := 1.0
		if r.pairs {
			names = 2
		}
		grants := slices.Clone(w.grants)
		slices.Sort(grants)
		errs := "0"
		if w.errs > 0 {
			errs = fmt.Sprintf("%d (first: %v)", w.errs, w.firstErr)
		}
		client, coord, redis := processCPU(w.cpu, r.store, w.total())
		cmds := "-"
		if r.store.redisProc != "" {
			per := float64(max(w.total(), 1))
			cmds = fmt.Sprintf("%.1f / %.1f", float64(w.cmds["evalsha"]+w.cmds["eval"])/per, float64(commandsIn(w.cmds))/per)
		}
		t.add(r.label(), rate(w.grantsPerSecond()), rate(w.grantsPerSecond()*names), fmt.Sprint(w.attempts), fmt.Sprint(w.ranOut), errs,
			fmt.Sprintf("%d / %d / %d", grants[0], grants[len(grants)/2], grants[len(grants)-1]),
			fmt.Sprintf("%s / %s / %s", dur(w.p50), dur(w.p99), dur(w.longest)),
			fmt.Sprintf("%s + %s + %s", us(client), us(coord), us(redis)), fmt.Sprintf("%.2f", w.refused/float64(max(w.total(), 1))), cmds, "")
		if why := r.stalled(); why != "" {
			stalls = append(stalls, r.label()+": "+why)
		}
		if len(r.stall) > 0 {
			notes := fmt.Sprintf("no grant for %s; then:\n      %s", stallAfter, strings.Join(r.stall, "\n      "))
			stallNotes = append(stallNotes, r.label()+": "+notes)
		}
		env.report.add(record{Suite: "groups", Case: "contended", Method: r.key(), Concurrency: hotWorkers, PerSecond: w.grantsPerSecond(), Unit: "grants/s",
			P50Micros: micros(w.p50), P99Micros: micros(w.p99), Errors: w.errs,
			CPUMicros: micros(client + coord + redis), ClientCPUMicros: micros(client), ServersCPUMicros: micros(coord + redis),
			Extra: map[string]any{"store": r.store.key, "names": hotNames, "attempts": w.attempts, "waits_run_out": w.ranOut,
				"refused_attempts": w.refused, "grants_min": grants[0], "grants_max": grants[len(grants)-1], "longest_us": micros(w.longest), "rounds": roundRates(r)}})
	}
	t.print()
	fmt.Println("   a grant is one acquisition granted (a pair's two names at once) and released; time to grant: from asking to the grant;")
	fmt.Println("   refused attempts: the coordinator's store attempts that found a name in the way, retries while waiting included")
	fmt.Println("   (coordinator_acquire_contended_total); Redis scripts / cmds: the script calls a grant took, and every command")
	fmt.Println("   (INFO commandstats: the scripts and what they ran)")
	fmt.Printf("   every client must be granted and no wait of %s run out, else the suite fails: a deadlock would leave a group waiting\n", groupsWait)
	for _, s := range stalls {
		fmt.Printf("   STALLED: %s\n", s)
	}
	for _, s := range stallNotes {
		fmt.Printf("   %s\n", s)
	}
	return stalls
}

// printGroupTargets prints issue 37's targets, each a ratio within this
// run, for the standalone Redis store (and the other stores, whose figures
// have no target, beside it).
func printGroupTargets(env benchEnv, rows []*groupRow, contended []*contendedRow) {
	last := env.levels[len(env.levels)-1]
	var stores []*groupStore
	for _, r := range rows {
		if !slices.Contains(stores, r.store) {
			stores = append(stores, r.store)
		}
	}
	header := []string{fmt.Sprintf("issue 37 targets (c=%d)", last), "target"}
	for _, s := range stores {
		header = append(header, s.label)
	}
	t := table{header: header}
	// verdict marks v against its target where the issue sets one.
	verdict := func(v float64, met, target bool) string {
		switch {
		case v <= 0:
			return "-"
		case !target:
			return ratioCell(v) + " (no target)"
		case met:
			return ratioCell(v) + " met"
		default:
			return ratioCell(v) + " missed"
		}
	}
	for _, k := range groupSizes[1:] {
		row := []string{fmt.Sprintf("Redis CPU per name, group of %d ÷ a single-name cycle's", k), "≤ 1.2"}
		for _, s := range stores {
			var v float64
			for _, r := range rows {
				if r.store == s && r.size == k {
					v = redisPerNameRatio(rows, r, last)
				}
			}
			row = append(row, verdict(v, v <= 1.2, s.key == "redis" || s.key == "redis-sdk"))
		}
		t.add(row...)
	}
	for _, k := range groupSizes[1:] {
		row := []string{fmt.Sprintf("all processes' CPU per name, group of %d ÷ a single-name cycle's", k), ""}
		for _, s := range stores {
			row = append(row, allPerNameRatio(rows, s, k, last))
		}
		t.add(row...)
	}
	pairsRow := []string{"contended grants/s, random pairs ÷ single names", "≥ 0.5"}
	progressRow := []string{"no deadlock: every client granted, no wait run out", "all"}
	for _, s := range stores {
		var pairs, single *contendedRow
		for _, r := range contended {
			if r.store == s && r.na == "" {
				if r.pairs {
					pairs = r
				} else {
					single = r
				}
			}
		}
		if pairs == nil || single == nil {
			pairsRow = append(pairsRow, "-")
			progressRow = append(progressRow, "-")
			continue
		}
		p, _ := pairs.median()
		o, _ := single.median()
		v := p.grantsPerSecond() / o.grantsPerSecond()
		pairsRow = append(pairsRow, verdict(v, v >= 0.5, s.key != "redis-cluster"))
		if pairs.stalled() == "" && single.stalled() == "" {
			progressRow = append(progressRow, "met")
		} else {
			progressRow = append(progressRow, "FAILED")
		}
	}
	t.add(pairsRow...)
	t.add(progressRow...)
	fmt.Println()
	t.print()
	fmt.Println("   from the median runs; the cost targets are the Redis store's on one Redis (one slot), over raw Stream operations and")
	fmt.Println("   through the Go SDK; the Cluster's groups span 2 and 3 slots, one script a slot, and their figures are stated, not targets")
}

// allPerNameRatio is the CPU per name of every process of the store's
// group of k over its single-name cycle's CPU per cycle.
func allPerNameRatio(rows []*groupRow, s *groupStore, k, n int) string {
	var group, single *groupRow
	for _, r := range rows {
		if r.store == s && r.na == "" {
			switch r.size {
			case k:
				group = r
			case 1:
				single = r
			}
		}
	}
	if group == nil || single == nil {
		return "-"
	}
	g, ok1 := group.median(n)
	o, ok2 := single.median(n)
	if !ok1 || !ok2 || g.ops == 0 || o.ops == 0 {
		return "-"
	}
	gc, gco, gr := processCPU(g.cpu, s, g.ops)
	oc, oco, or := processCPU(o.cpu, s, o.ops)
	return ratio(float64(gc+gco+gr)/float64(k), float64(oc+oco+or))
}

// roundRates is the grants/s of each run of r, in the order they ran.
func roundRates(r *contendedRow) []float64 {
	out := make([]float64, len(r.runs))
	for i, run := range r.runs {
		out[i] = run.grantsPerSecond()
	}
	return out
}
