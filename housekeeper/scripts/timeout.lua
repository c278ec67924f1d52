-- timeout.lua: moves in-flight messages whose ack deadline passed back to the
-- active pool with score 0, first to be pulled again.
--
-- KEYS[1] in flight    <prefix>:queue:{Q}:tmp                     ZSET id -> ack deadline (unix ms)
-- KEYS[2] active pool  <prefix>:queue:{Q}                         ZSET id -> priority
-- KEYS[3] fence        <prefix>:housekeeper:{Q}:fence:timeout     STRING highest token seen
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
-- ARGV[2] limit: most ids moved by this call
--
-- Returns the number of ids moved: fewer than ARGV[2] means nothing due is left.
-- Returns the error "FENCED <highest>" and moves nothing when ARGV[1] is below
-- the token in KEYS[3]; an equal or higher token is accepted and stored.
--
-- Due means deadline <= Redis TIME.

if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: allow TIME before writes

local token = ARGV[1]
if not string.match(token, '^%d+$') or #token > 20 then
  return redis.error_reply('ERR fencing token must be a decimal uint64')
end
local highest = redis.call('GET', KEYS[3])
-- Decimal strings without leading zeros: shorter is smaller, equal lengths compare as text.
if highest and (#token < #highest or (#token == #highest and token < highest)) then
  return redis.error_reply('FENCED ' .. highest)
end
if highest ~= token then
  redis.call('SET', KEYS[3], token)
end

local t = redis.call('TIME')
local now = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))

local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[2])
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
  redis.call('ZADD', KEYS[2], unpack(args))
  redis.call('ZREM', KEYS[1], unpack(ids, i, last))
end
return #ids
