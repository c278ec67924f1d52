-- grants.lua: reading all of a lease key's grants (HGETALL replies), and
-- the weights of queued waiters, with holders.lua's decoder. scripts.go puts
-- it in front of describe.lua and watch.lua, and into acquire.lua where
-- that script asks for it, after its uncontended path, which needs none of
-- it, up to the line below: local functions cost every call that defines
-- them.

-- Calls f(grant) for each grant in an HGETALL reply.
local function each_grant(all, f)
  for i = 1, #all, 2 do
    local field = all[i]
    if string.sub(field, 1, 2) == HOLDER then
      local g = unpack_grant(string.sub(field, 3), all[i + 1])
      if g then f(g) end
    end
  end
end

local function queue_weight(score)
  return tonumber(score) % WEIGHT_SPAN
end

-- (acquire.lua's part of grants.lua ends here: scripts.go)

-- The live grants of an HGETALL reply at now, in token order (each with
-- its session: holders.lua), and the capacity it records (absent: 1).
local function live_grants(all, now)
  local out = {}
  each_grant(all, function(g)
    if g.expires > now then out[#out + 1] = g end
  end)
  table.sort(out, function(a, b)
    if #a.token ~= #b.token then return #a.token < #b.token end
    return a.token < b.token
  end)
  local cap = 1
  for i = 1, #all, 2 do
    if all[i] == 'cap' then cap = tonumber(all[i + 1]) or 1 end
  end
  return out, cap
end
