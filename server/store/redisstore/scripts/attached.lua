-- attached.lua: grants attached to sessions, in a lease key. scripts.go
-- puts it after holders.lua in front of every script that must not trust
-- an attached grant past its bound (acquire, describe, watch, settle).
--
-- An attached grant is an ordinary grant record (holders.lua) that names
-- its session and whose expiry is a bound: its session's expiry as this
-- name last learned it, from a proof that the session's slot gave as
-- remaining milliseconds and that the name applied as its own now plus
-- those (later than the truth by the transit: the safe side). The
-- summary's slow ('sum', holders.lua) is at most the earliest bound of the
-- attached records, so that a script looks at them only when one may have
-- passed.
--
-- A proof is ARGV text "id=kind:ms,..." with kind a (alive, ms remaining),
-- e (expired, ms ago), c (closed) or g (gone: unknown to its slot, so dead
-- for at least the retention, which its key outlives it by). A proof of
-- death is never stale (a dead session never revives); a proof of life
-- only pushes a bound out.

local function parse_proofs(text)
  local proofs = {}
  for id, kind, n in string.gmatch(text, '([^=,]+)=(%a):(%d+)') do
    proofs[id] = {kind = kind, n = tonumber(n)}
  end
  return proofs
end

-- Brings the attached grants of lease up to date at now with proofs
-- (a table from parse_proofs), keep being how long the key outlives the
-- latest grant's lock delay while grants are attached. Returns the ids of
-- the sessions it needs proofs of (a grant's bound passed and no proof was
-- given: nothing is changed then), or nil, whether a grant ended (a
-- closed session's grant is released: the caller announces it), the key's
-- fields as they were, and then the grants' number and latest expiry or
-- bound (high) and whether any grant is still attached, as they are now.
local function settle(lease, now, proofs, delay, keep)
  local all = redis.call('HGETALL', lease)
  local att, fields = {}, {}
  for i = 1, #all, 2 do
    local f = all[i]
    fields[f] = all[i + 1]
    if string.sub(f, 1, 2) == HOLDER then
      local g = unpack_grant(string.sub(f, 3), all[i + 1])
      if g and g.session ~= '' then att[#att + 1] = g end
    end
  end
  local need, seen = {}, {}
  for _, g in ipairs(att) do
    local id = g.session
    if g.expires <= now and not proofs[id] and not seen[id] then
      need[#need + 1], seen[id] = id, true
    end
  end
  if #need > 0 then return need, false, fields end

  local n, used, low, high = unpack_sum(fields['sum'])
  local set, del, slow, ended = {}, {}, nil, false
  for _, g in ipairs(att) do
    local p = proofs[g.session]
    if not p then
      if not slow or g.expires < slow then slow = g.expires end
    elseif p.kind == 'a' then
      local e = now + p.n
      if e > g.expires then
        g.expires = e
        set[#set + 1], set[#set + 2] = HOLDER .. g.holder, pack_grant(g.token, g.weight, g.ttl, ms(e), g.session, g.value)
        if e > high then high = e end
      end
      if not slow or g.expires < slow then slow = g.expires end
    elseif p.kind == 'c' then
      del[#del + 1] = HOLDER .. g.holder
      used, n, ended = used - g.weight, n - 1, true
    else
      -- Expired: the grant ended when its session did (or, gone, at least
      -- the retention ago); its lock delay runs from then. It is an
      -- ordinary expired grant from now on: its record names no session.
      local e = now - p.n
      if p.kind == 'g' then e = now - keep end
      if e < g.expires then
        g.expires = e
        if not low or e < low then low = e end
      end
      set[#set + 1], set[#set + 2] = HOLDER .. g.holder, pack_grant(g.token, g.weight, g.ttl, ms(g.expires), '', g.value)
    end
  end
  if n <= 0 then
    if fields['sum'] then del[#del + 1] = 'sum' end
  else
    set[#set + 1], set[#set + 2] = 'sum', pack_sum(n, used, low, high, slow)
  end
  if #del > 0 then redis.call('HDEL', lease, unpack(del)) end
  if #set > 0 then redis.call('HSET', lease, unpack(set)) end
  -- The key outlives the grants and their lock delay by keep, never
  -- shortened (the observation mark and the waiters' deadlines hold it). A
  -- name left with no grant keeps the expiry its last grant or release
  -- gave it: a close and a refresh settle every name of a session,
  -- released ones too, and pushing those out by keep (an hour at least)
  -- kept every name a session had ever locked that long past its close.
  if n > 0 then
    local last = high + delay + keep
    local pttl = redis.call('PTTL', lease)
    if pttl >= 0 and now + pttl < last then redis.call('PEXPIREAT', lease, ms(last)) end
  end
  return nil, ended, fields, n, high, slow ~= nil
end
