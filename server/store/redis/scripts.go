package redisstore

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// One script per state transition; each file's header lists its KEYS, ARGV
// and reply. Script.Run sends EVALSHA and falls back to EVAL on NOSCRIPT
// (a restarted or flushed Redis), so loading them at start-up is only a
// warm-up.
var (
	//go:embed scripts/acquire.lua
	acquireSrc string
	//go:embed scripts/renew.lua
	renewSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/dequeue.lua
	dequeueSrc string
	//go:embed scripts/describe.lua
	describeSrc string
	//go:embed scripts/watch.lua
	watchSrc string

	acquireScript  = redis.NewScript(acquireSrc)
	renewScript    = redis.NewScript(renewSrc)
	releaseScript  = redis.NewScript(releaseSrc)
	dequeueScript  = redis.NewScript(dequeueSrc)
	describeScript = redis.NewScript(describeSrc)
	watchScript    = redis.NewScript(watchSrc + describeSrc)

	allScripts = []*redis.Script{acquireScript, renewScript, releaseScript, dequeueScript, describeScript, watchScript}
)
