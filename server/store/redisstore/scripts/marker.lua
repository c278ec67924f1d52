-- marker.lua: the data-loss check of every script that grants (acquire.lua)
-- or vouches for a session (session.lua), the same in both: scripts.go puts
-- it in place of their "-- (marker.lua goes here: scripts.go)" line, as
-- statements rather than a function, which each call would make again. It
-- expects marker (the slot's data-loss marker key), now (Redis' time, ms)
-- and quarantine (ms) in scope, and leaves lost (1 when this call found the
-- marker missing, else 0).
--
-- The marker is written at start-up and never expires, so its absence
-- means Redis lost its data (restart without persistence, FLUSHALL,
-- failover to an empty replica): refuse until the quarantine has passed.
local lost = 0
local until_ms = redis.call('GET', marker)
if until_ms then
  until_ms = tonumber(until_ms) or 0
else
  lost = 1
  until_ms = now + quarantine
  redis.call('SET', marker, string.format('%d', until_ms))
end
if now < until_ms then
  return {-1, lost, until_ms - now}
end
