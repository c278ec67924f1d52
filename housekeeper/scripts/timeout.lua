-- timeout.lua: moves in-flight messages whose ack deadline passed back to the
-- active pool with score 0, first to be pulled again.
--
-- KEYS[1] fence        <prefix>:housekeeper:{Q}:fence:timeout     STRING highest token seen
-- KEYS[2] in flight    <prefix>:queue:{Q}:tmp                     ZSET id -> ack deadline (unix ms)
-- KEYS[3] active pool  <prefix>:queue:{Q}                         ZSET id -> priority
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
-- ARGV[2] limit: most ids moved by this call
--
-- Returns the number of ids moved: fewer than ARGV[2] means nothing due is left.
-- Returns the error "FENCED <highest>" and moves nothing when ARGV[1] is below
-- the token in KEYS[1]; an equal or higher token is accepted and stored.
--
-- Due means deadline <= Redis TIME.

-- fence.lua, prepended to this script, has checked the token and set now.

local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, ARGV[2])
if #ids == 0 then
  return 0
end

local step = 1000
for i = 1, #ids, step do
  local last = math.min(i + step - 1, #ids)
  local args = {}
  for j = i, last do
    args[#args + 1] = '0'
    args[#args + 1] = ids[j]
  end
  redis.call('ZADD', KEYS[3], unpack(args))
  redis.call('ZREM', KEYS[2], unpack(ids, i, last))
end
return #ids
