-- quarantine.lua: refuse grants for the quarantine from now, as after a
-- detected data loss; run when the primary changed under a coordinator (a
-- failover may have lost grants the old primary acknowledged, and the new
-- primary may still hold the marker).
--
-- KEYS[1] data-loss marker
-- ARGV[1] quarantine (ms, >= 0)
--
-- Returns the Redis time (unix ms) until which grants are refused. A marker
-- holding a later time keeps it.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local until_ms = now + tonumber(ARGV[1])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if cur > until_ms then
  return cur
end
redis.call('SET', KEYS[1], string.format('%d', until_ms))
return until_ms
