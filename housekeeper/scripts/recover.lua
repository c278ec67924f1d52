-- recover.lua: puts messages read from Deckard's storage back into their
-- queue's active pool after the cache lost them, as Deckard's insert script
-- does: a message already in the active pool, a lock set or :tmp is
-- skipped, so in-flight and locked messages are not put back.
--
-- KEYS[1] active pool  <prefix>:queue:{Q}
-- KEYS[2] lock_nack    <prefix>:queue:{Q}:lock_nack
-- KEYS[3] lock_ack     <prefix>:queue:{Q}:lock_ack
-- KEYS[4] in flight    <prefix>:queue:{Q}:tmp
-- KEYS[5] fence        <prefix>:housekeeper:{Q}:fence:recovery  STRING highest token seen
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
-- ARGV[2] the caller's lease ends at this Redis time, unix ms: refused after it
-- ARGV[3..] score, id, score, id, ...
--
-- Returns the number of ids inserted. Returns the error "FENCED <highest>"
-- when ARGV[1] is below the token in KEYS[5] (an equal or higher one is
-- stored), and "EXPIRED <now>" when Redis' clock is past ARGV[2]; either inserts
-- nothing.

-- check_fence and now_ms come from fence.lua, prepended to this script.

local refused = check_fence(KEYS[5], ARGV[1])
if refused then
  return refused
end
local now = now_ms()
if tonumber(now) > tonumber(ARGV[2]) then
  return redis.error_reply('EXPIRED ' .. now)
end

local add = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i + 1]
  if not (redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[2], id)
      or redis.call('ZSCORE', KEYS[3], id) or redis.call('ZSCORE', KEYS[4], id)) then
    add[#add + 1] = ARGV[i]
    add[#add + 1] = id
  end
end
local step = 1000
for i = 1, #add, step do
  redis.call('ZADD', KEYS[1], unpack(add, i, math.min(i + step - 1, #add)))
end
return #add / 2
