-- fence.lua: the fencing check every fenced script starts with; it is
-- prepended to each (queues.go, cache.go), so it is not a script of its own.
--
-- KEYS[1] fence  STRING the highest fencing token seen
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
--
-- A token at least the one in KEYS[1] is accepted and stored, and the script
-- goes on with `now`, Redis TIME in unix milliseconds as an exact decimal
-- string. A lower token ends the script with the error "FENCED <highest>"
-- before it changes anything.

if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: allow TIME before writes

do
  local token = ARGV[1]
  if not string.match(token, '^%d+$') or #token > 20 then
    return redis.error_reply('ERR fencing token must be a decimal uint64')
  end
  local highest = redis.call('GET', KEYS[1])
  -- Decimal strings without leading zeros: shorter is smaller, equal lengths compare as text.
  if highest and (#token < #highest or (#token == #highest and token < highest)) then
    return redis.error_reply('FENCED ' .. highest)
  end
  if highest ~= token then
    redis.call('SET', KEYS[1], token)
  end
end

local now
do
  local t = redis.call('TIME')
  now = t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
end
