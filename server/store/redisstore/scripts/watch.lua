-- watch.lua: mark names as observed, so that their changes are announced,
-- and read their grants, in one call for many names.
--
-- KEYS[i] lease: the key of the i-th name, as the key layout in doc.go
-- describes it (all in one Cluster slot). holders.lua comes first
-- (scripts.go): the grant records.
-- ARGV[1] how long a mark lasts (ms)
-- ARGV[1+i] "1" to mark the i-th name, "" to only read it: the caller marks
--           a name again only when its last mark is near its end, so that an
--           observed name costs one read per call
-- ARGV[#KEYS+2] proofs of sessions (attached.lua), which comes first too
-- ARGV[#KEYS+3] lock delay (ms)
-- ARGV[#KEYS+4] how long a key outlives attached grants' bounds (ms)
--
-- An attached grant whose bound passed is settled first (attached.lua);
-- when a proof is missing the reply is {-4, session_id...} instead, the
-- marks being set again at the next call (they only ever grow).
--
-- A mark is the lease key's 'watched' field, the time it lasts until; the
-- key lives at least as long. A mark is never shortened: another
-- coordinator may have set a longer one.
--
-- Redis calls: 1 + one HGETALL a name, and 3 more for a name marked (HSET,
-- PTTL, PEXPIREAT).
--
-- Returns, per name in order: capacity, count, then seven elements per live
-- grant, in token order: holder, token, value, ttl_ms, expires_ms, weight,
-- session
-- (expires_ms in unix ms of Redis' clock, token a decimal string).
-- decodeWatch in scripts.go is the one reader of this reply.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local mark = tonumber(ARGV[1])
local proofs, delay, keep = nil, tonumber(ARGV[#KEYS + 3]), tonumber(ARGV[#KEYS + 4])
local out, needed, seen = {}, {-4}, {}
for i = 1, #KEYS do
  local lease = KEYS[i]
  local all = redis.call('HGETALL', lease)
  local watched, slow = 0, nil
  for j = 1, #all, 2 do
    if all[j] == 'watched' then watched = tonumber(all[j + 1]) or 0 end
    if all[j] == 'sum' then slow = select(5, unpack_sum(all[j + 1])) end
  end
  if slow and now >= slow then
    proofs = proofs or parse_proofs(ARGV[#KEYS + 2])
    local need = settle(lease, now, proofs, delay, keep)
    if need then
      for _, id in ipairs(need) do
        if not seen[id] then needed[#needed + 1], seen[id] = id, true end
      end
    else
      all = redis.call('HGETALL', lease)
    end
  end
  if ARGV[1 + i] == '1' and watched < now + mark then
    local until_ms = now + mark
    redis.call('HSET', lease, 'watched', ms(until_ms))
    local pttl = redis.call('PTTL', lease)
    if pttl < 0 or now + pttl < until_ms then
      redis.call('PEXPIREAT', lease, ms(until_ms))
    end
  end
  local grants, cap = live_grants(all, now)
  local k = #out
  out[k + 1], out[k + 2] = cap, #grants
  for _, g in ipairs(grants) do
    k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6], out[k + 7] =
      g.holder, g.token, g.value, g.ttl, g.expires, g.weight, g.session
  end
end
if #needed > 1 then return needed end
return out
