-- describe.lua: read a name's grants, capacity, last token and queue at one
-- instant.
--
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] waiters: the name's keys, as the key
-- layout in doc.go describes them. holders.lua, grants.lua and attached.lua
-- come first (scripts.go): the grant records, the weights in queue scores
-- and the grants attached to sessions.
-- ARGV[1] proofs of sessions (attached.lua)
-- ARGV[2] lock delay (ms)
-- ARGV[3] how long the key outlives attached grants' bounds (ms)
--
-- Redis calls: 4 (TIME, HGETALL, ZRANGEBYSCORE, ZRANGE) and one ZSCORE a
-- queued waiter while any waits.
--
-- Returns {capacity, last_token, waiters, waiting_weight, count, then seven
-- elements per live grant, in token order: holder, token, value, ttl_ms,
-- expires_ms, weight, session}, or {-4, session_id...} when proofs of those
-- sessions are needed first (nothing changed): expires_ms in unix ms of Redis' clock; token and
-- last_token are decimal strings; waiters counts the queued waiters whose
-- deadline has not passed and waiting_weight sums their weights. It writes
-- only to settle attached grants.
-- decodeDescribe in scripts.go is the one reader of this reply.
--
-- last_token is the counter, or, when the counter is gone (never granted,
-- idle past its retention, data loss), Redis' clock in microseconds less one.
-- That is at least every token issued before: acquire.lua issues the larger
-- of the counter plus one and the clock in microseconds, and scripts of one
-- name are more than a microsecond apart, so no token exceeds the clock at
-- its grant; and it is below every token issued later. Both hold as long as
-- the clock does not step back.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local last, slow
for i = 1, #all, 2 do
  if all[i] == 'token' then last = all[i + 1] end
  if all[i] == 'sum' then slow = select(5, unpack_sum(all[i + 1])) end
end
-- An attached grant whose bound passed is settled first (attached.lua):
-- a vacancy is reported only once its session is known dead.
if slow and now >= slow then
  local need = settle(KEYS[1], now, parse_proofs(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]))
  if need then
    table.insert(need, 1, -4)
    return need
  end
  all = redis.call('HGETALL', KEYS[1])
end
if not last then
  -- TIME's microseconds less one, without going through a Lua number (a
  -- double) on the way; the microsecond part is 0 .. 999999.
  local us = tonumber(time[2])
  if us > 0 then
    last = time[1] .. string.format('%06d', us - 1)
  else
    last = (tonumber(time[1]) - 1) .. '999999'
  end
end
local live = {}
for _, w in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], ms(now), '+inf')) do live[w] = true end
local waiting, waiting_weight = 0, 0
if next(live) then
  local q = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
  for i = 1, #q, 2 do
    if live[q[i]] then
      waiting, waiting_weight = waiting + 1, waiting_weight + queue_weight(q[i + 1])
    end
  end
end
local grants, cap = live_grants(all, now)
local out = {cap, last, waiting, waiting_weight, #grants}
for _, g in ipairs(grants) do
  local k = #out
  out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6], out[k + 7] = g.holder, g.token, g.value, g.ttl, g.expires, g.weight, g.session
end
return out
