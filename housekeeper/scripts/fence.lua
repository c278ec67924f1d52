-- fence.lua: the fencing check both batch scripts start with; queues.go
-- prepends it to each, so it is not a script of its own.
--
-- check_fence(key, token) accepts a decimal uint64 token that is at least the
-- highest seen in key (a STRING), storing it, and returns nil; for a lower
-- token it returns the error "FENCED <highest>" for the script to return.
--
-- now_ms() is Redis TIME in unix milliseconds, as an exact decimal string.

if redis.replicate_commands then redis.replicate_commands() end -- Redis < 5: allow TIME before writes

local function check_fence(key, token)
  if not string.match(token, '^%d+$') or #token > 20 then
    return redis.error_reply('ERR fencing token must be a decimal uint64')
  end
  local highest = redis.call('GET', key)
  -- Decimal strings without leading zeros: shorter is smaller, equal lengths compare as text.
  if highest and (#token < #highest or (#token == #highest and token < highest)) then
    return redis.error_reply('FENCED ' .. highest)
  end
  if highest ~= token then
    redis.call('SET', key, token)
  end
  return nil
end

local function now_ms()
  local t = redis.call('TIME')
  return t[1] .. string.format('%03d', math.floor(tonumber(t[2]) / 1000))
end
