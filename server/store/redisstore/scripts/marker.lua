-- marker.lua: the data-loss check of every script that grants (acquire.lua)
-- or vouches for a session (session.lua), the same in both: scripts.go puts
-- it in place of their "-- (marker.lua goes here: scripts.go)" line, as
-- statements rather than a function, which each call would make again. It
-- expects marker (the slot's data-loss marker key), now (Redis' time, ms),
-- now_ms (the same as a decimal string) and quarantine (ms) in scope, and
-- leaves lost (1 when this call found the marker missing, else 0).
--
-- The marker holds the end of the quarantine (ms, decimal; "0" for none),
-- compared with now_ms as a decimal string (longer is larger) so that a
-- grant converts no number here; one that is not a number is no quarantine.
--
-- The marker is written at start-up and never expires, so its absence
-- means Redis lost its data (restart without persistence, FLUSHALL,
-- failover to an empty replica): refuse until the quarantine has passed.
local lost = 0
local until_ms = redis.call('GET', marker)
if not until_ms then
  lost = 1
  until_ms = string.format('%d', now + quarantine)
  redis.call('SET', marker, until_ms)
end
if #until_ms > #now_ms or (#until_ms == #now_ms and until_ms > now_ms) then
  local left = (tonumber(until_ms) or 0) - now
  if left > 0 then return {-1, lost, left} end
end
