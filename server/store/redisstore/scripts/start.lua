-- start.lua: at start-up, find which data-loss markers are missing and write
-- them. A marker is written once and never expires, so a missing one means
-- Redis lost its data while no coordinator watched (restart without
-- persistence, FLUSHALL, failover to an empty replica), unless the
-- deployment is new.
--
-- KEYS[1..n] data-loss markers (on a Cluster, all in one slot)
-- ARGV[1] quarantine (ms, 0 disables)
-- ARGV[2] "1" when the deployment says the store is new: missing markers are
--         written as "0" (no quarantine), else ""
--
-- Returns the number of markers that were missing. A marker that exists is
-- left as it is, with any quarantine it holds.

local quarantine, new_store = tonumber(ARGV[1]), ARGV[2] == '1'
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local value = '0'
if not new_store and quarantine > 0 then
  value = string.format('%d', now + quarantine)
end
local missing = 0
for _, marker in ipairs(KEYS) do
  if redis.call('SET', marker, value, 'NX') then
    missing = missing + 1
  end
end
return missing
