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

// cpuSample is the CPU time of each process at one moment.
type cpuSample []time.Duration

func (m *cpuMeter) read() cpuSample {
	if m == nil {
		return nil
	}
	out := make(cpuSample, len(m.pids))
	for i, pid := range m.pids {
		out[i], _ = procCPU(pid)
	}
	return out
}

// cpuUse is what one measurement cost: the client's (this process's) CPU
// and the servers' (every other process's).
type cpuUse struct {
	client, servers time.Duration
	by              map[string]time.Duration
}

func (m *cpuMeter) since(before cpuSample) cpuUse {
	after := m.read()
	use := cpuUse{by: map[string]time.Duration{}}
	for i := range before {
		d := after[i] - before[i]
		use.by[m.names[i]] += d
		if m.pids[i] == os.Getpid() {
			use.client += d
		} else {
			use.servers += d
		}
	}
	return use
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
