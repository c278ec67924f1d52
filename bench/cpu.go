package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// cpuMeter reads the CPU time (user + system, all threads) of the bench's
// processes from /proc: this one, the children and the local Redis. On a
// 2-core machine shared by all of them, throughput mostly says how much CPU
// a cycle costs in total; this says where it goes.
type cpuMeter struct {
	pids  []int
	names []string
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux build that matters (Go has no sysconf without cgo).
const clockTicks = 100

func (m *cpuMeter) add(name string, pid int) {
	if m == nil || pid <= 0 {
		return
	}
	if _, err := procCPU(pid); err != nil {
		return
	}
	m.pids = append(m.pids, pid)
	m.names = append(m.names, name)
}

// addRedis adds the Redis server when it runs on this machine (its
// process_id names a redis process here).
func (m *cpuMeter) addRedis(ctx context.Context, rdb *redis.Client) {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				return
			}
			if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.Contains(string(comm), "redis") {
				m.add("redis", pid)
			}
			return
		}
	}
}

// cpuSample is the CPU time and the activity of each process at one
// moment.
type cpuSample struct {
	cpu []time.Duration
	act []procActivity
}

func (m *cpuMeter) read() cpuSample {
	if m == nil {
		return cpuSample{}
	}
	out := cpuSample{cpu: make([]time.Duration, len(m.pids)), act: make([]procActivity, len(m.pids))}
	for i, pid := range m.pids {
		out.cpu[i], _ = procCPU(pid)
		out.act[i] = procActivityOf(pid)
	}
	return out
}

// cpuUse is what one measurement cost: the client's (this process's) CPU
// and the servers' (every other process's), and each process's CPU and
// activity.
type cpuUse struct {
	client, servers time.Duration
	by              map[string]time.Duration
	act             map[string]procActivity
}

func (m *cpuMeter) since(before cpuSample) cpuUse {
	after := m.read()
	use := cpuUse{by: map[string]time.Duration{}, act: map[string]procActivity{}}
	for i := range before.cpu {
		d := after.cpu[i] - before.cpu[i]
		use.by[m.names[i]] += d
		a := use.act[m.names[i]]
		a.switches += after.act[i].switches - before.act[i].switches
		a.syscalls += after.act[i].syscalls - before.act[i].syscalls
		use.act[m.names[i]] = a
		if m.pids[i] == os.Getpid() {
			use.client += d
		} else {
			use.servers += d
		}
	}
	return use
}

// procActivity counts what costs a process CPU beyond its own work on a
// loaded machine: its threads' context switches (voluntary ones are
// wake-ups: a thread that blocked, on a futex or a socket, and was woken)
// and its read and write system calls (each socket read or write).
// Counts, unlike CPU time, do not grow with the machine's load.
type procActivity struct {
	switches, syscalls int64
}

// procActivityOf sums the context switches of pid's threads
// (/proc/PID/task/TID/status) and its read and write calls
// (/proc/PID/io: syscr, syscw); what it cannot read counts 0.
func procActivityOf(pid int) procActivity {
	var a procActivity
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, t := range tasks {
		a.switches += procFields(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()), "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
	}
	a.syscalls = procFields(fmt.Sprintf("/proc/%d/io", pid), "syscr:", "syscw:")
	return a
}

// procFields sums the numbers that follow the given names at the start of
// the lines of a /proc file.
func procFields(path string, names ...string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var sum int64
	for _, line := range strings.Split(string(data), "\n") {
		for _, name := range names {
			if v, ok := strings.CutPrefix(line, name); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// procCPU is utime + stime of pid, all its threads.
func procCPU(pid int) (time.Duration, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return 0, err
	}
	// The command may hold spaces and parentheses: fields count from the
	// last ')'. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, line)
	}
	fields := strings.Fields(line[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, line)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, line)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}
