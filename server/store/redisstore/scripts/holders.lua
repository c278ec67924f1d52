-- holders.lua: the holder records of a lease key, and the weights packed
-- into queue scores. scripts.go puts this file in front of every script
-- that reads either, so that both are encoded and decoded here alone (with
-- grants.lua, which reads many records). It defines as little as it can:
-- every local function is made again at each call of a script (about 400
-- instructions each). So the encoders come first and the decoders after the
-- decoders line below, which scripts.go puts in acquire and release after
-- their uncontended paths, and in the others right here.
--
-- A grant is the lease key's field 'h:' .. holder, whose value packs
--   token ':' weight ':' ttl_ms ':' expires_ms ':' session ':' value
-- (decimal integers; session the id of the session the grant is attached
-- to, hex digits, or "" for a grant of its own TTL: attached.lua; the value
-- last, since it may hold any bytes). The attachment lives in the record
-- so that an attached grant and its release write and delete no field
-- more than a grant of its own does, and no attachment can outlive or
-- disagree with its grant.
--
-- The grants' summary is the lease key's field 'sum', whose value packs
--   n ':' used ':' low ':' high [':' slow]
-- (decimal integers): how many grant records there are, live or in their
-- lock delay, the sum of their weights, at most the earliest of their
-- expiries and at least the latest; slow, present while grants may be
-- attached to sessions, at most the earliest of their bounds
-- (attached.lua). It is absent while there is none, so that the
-- uncontended grant reads one field, and writes one, for all five, and
-- the release of the last grant deletes one.
--
-- A waiter's queue score is order * WEIGHT_SPAN + weight: arrival order
-- first, so that ZRANGE still lists waiters in arrival order, and the weight
-- the waiter asked for in the low 20 bits (WEIGHT_SPAN is above
-- store.MaxCapacity), so that Dequeue and RefreshWaiters, which know only
-- waiter ids, need no weights. A double holds the score exactly while order
-- stays below 2^33: a queue that never empties for 8.6 billion arrivals.

local HOLDER = 'h:'
local WEIGHT_SPAN = 1048576
-- The patterns of a grant record and of the summary, with a capture per
-- field: unpack_grant and unpack_sum below use them, and so does
-- acquire.lua's short refusal, which reads one record without the
-- decoders (converting no number).
local GRANT_FORMAT = '^(%d+):(%d+):(%d+):(%d+):(%x*):(.*)$'
local SUM_FORMAT = '^(%d+):(%d+):(%d+):(%d+):?(%d*)$'

-- Integers are formatted with %d: Lua's tostring would print 1.8e+15.
local function ms(n) return string.format('%d', n) end

-- Each of token .. expires is a decimal string or an integer below 1e14,
-- which Lua's concatenation writes exactly (%.14g): callers on the
-- uncontended path pass ARGV strings as they came, since formatting numbers
-- is most of what a grant costs Redis. session is an id or "".
local function pack_grant(token, weight, ttl, expires, session, value)
  return token .. ':' .. weight .. ':' .. ttl .. ':' .. expires .. ':' .. session .. ':' .. value
end

-- (holders.lua's decoders follow: scripts.go)

-- Returns the grant packed in rec, or nil for nil (or a record that is not
-- one: it is treated as absent).
local function unpack_grant(holder, rec)
  if not rec then return nil end
  local token, weight, ttl, expires, session, value = string.match(rec, GRANT_FORMAT)
  if not token then return nil end
  return {holder = holder, token = token, weight = tonumber(weight), ttl = tonumber(ttl),
    expires = tonumber(expires), session = session, value = value}
end

-- Returns n, used, low, high, slow of the summary packed in s: 0, 0, nil,
-- 0, nil for nil (no grants), and 0, 0, 0, 0, 0 for a value that is not
-- one (a low of 0 then sends the next grant to read the records, which
-- sets the summary exactly, and a slow of 0 to settle the attached ones).
local function unpack_sum(s)
  if not s then return 0, 0, nil, 0, nil end
  local n, used, low, high, slow = string.match(s, SUM_FORMAT)
  if not n then return 0, 0, 0, 0, 0 end
  return tonumber(n), tonumber(used), tonumber(low), tonumber(high), tonumber(slow)
end

-- Packs a summary; a low that is not known (nil) is 0: a grant may have run
-- out; a slow that is nil is left out: no grant is attached.
local function pack_sum(n, used, low, high, slow)
  local s = ms(n) .. ':' .. ms(used) .. ':' .. ms(low or 0) .. ':' .. ms(high)
  if slow then s = s .. ':' .. ms(slow) end
  return s
end
