-- unlock.lua: moves the due messages of one lock set back to the active pool.
--
-- KEYS[1] fence        <prefix>:housekeeper:{Q}:fence:unlock      STRING highest token seen
-- KEYS[2] lock set     <prefix>:queue:{Q}:lock_ack or :lock_nack  ZSET id -> unlock time (unix ms)
-- KEYS[3] score set    KEYS[2] .. ":score"                        ZSET id -> score to restore
-- KEYS[4] active pool  <prefix>:queue:{Q}                         ZSET id -> priority
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
-- ARGV[2] limit: most ids moved by this call
-- ARGV[3] score of an id with no saved score: "now" (Redis TIME, unix ms) or a number
--
-- Returns the number of ids moved: fewer than ARGV[2] means nothing due is left.
-- Returns the error "FENCED <highest>" and moves nothing when ARGV[1] is below
-- the token in KEYS[1]; an equal or higher token is accepted and stored.
--
-- Due means unlock time <= Redis TIME. Saved scores are handed to ZADD as the
-- strings ZSCORE returned, so they are restored exactly.

-- fence.lua, prepended to this script, has checked the token and set now.

local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, ARGV[2])
if #ids == 0 then
  return 0
end

local default = ARGV[3]
if default == 'now' then
  default = now
end

local args = {} -- score, id, score, id, ...
for _, id in ipairs(ids) do
  args[#args + 1] = redis.call('ZSCORE', KEYS[3], id) or default
  args[#args + 1] = id
end

-- Variadic calls in chunks: unpack() has a stack limit of a few thousand values.
local step = 1000
for i = 1, #args, step do
  redis.call('ZADD', KEYS[4], unpack(args, i, math.min(i + step - 1, #args)))
end
for i = 1, #ids, step do
  local last = math.min(i + step - 1, #ids)
  redis.call('ZREM', KEYS[2], unpack(ids, i, last))
  redis.call('ZREM', KEYS[3], unpack(ids, i, last))
end
return #ids
