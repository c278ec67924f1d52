-- recover.lua: puts messages read from Deckard's storage back into their
-- queue's active pool after the cache lost them, as Deckard's insert script
-- does: a message already in the active pool, a lock set or :tmp is
-- skipped, so in-flight and locked messages are not put back.
--
-- KEYS[1] fence        <prefix>:housekeeper:{Q}:fence:recovery  STRING highest token seen
-- KEYS[2] active pool  <prefix>:queue:{Q}
-- KEYS[3] lock_nack    <prefix>:queue:{Q}:lock_nack
-- KEYS[4] lock_ack     <prefix>:queue:{Q}:lock_ack
-- KEYS[5] in flight    <prefix>:queue:{Q}:tmp
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
-- ARGV[2] the caller's lease ends at this Redis time, unix ms: refused after it
-- ARGV[3..] score, id, score, id, ...
--
-- Returns the number of ids inserted. Returns the error "FENCED <highest>"
-- when ARGV[1] is below the token in KEYS[1] (an equal or higher one is
-- stored), and "EXPIRED <now>" when Redis' clock is past ARGV[2]; either inserts
-- nothing.

-- fence.lua, prepended to this script, has checked the token and set now.
if tonumber(now) > tonumber(ARGV[2]) then
  return redis.error_reply('EXPIRED ' .. now)
end

local add = {}
for i = 3, #ARGV, 2 do
  local id = ARGV[i + 1]
  if not (redis.call('ZSCORE', KEYS[2], id) or redis.call('ZSCORE', KEYS[3], id)
      or redis.call('ZSCORE', KEYS[4], id) or redis.call('ZSCORE', KEYS[5], id)) then
    add[#add + 1] = ARGV[i]
    add[#add + 1] = id
  end
end
local step = 1000
for i = 1, #add, step do
  redis.call('ZADD', KEYS[2], unpack(add, i, math.min(i + step - 1, #add)))
end
return #add / 2
