-- release_group.lua: compare-and-set end of several held grants of one
-- holder, on names of one slot: each as release.lua ends one, by that
-- script's own code (scripts.go puts it here as a function
-- release_one(KEYS, ARGV), after the settings line and holders.lua).
--
-- KEYS[i] the lease key of the i-th grant's name (doc.go's key layout).
-- ARGV[1] holder
-- ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1] the i-th grant's token
--         (decimal), name and claim: "" to release it whatever its value,
--         else only while its value is the claim (store.GroupLease.Claim:
--         a retry of the same holder that renewed it since set its own)
--
-- Redis calls: release.lua's, for each grant.
--
-- Returns one element a grant, in order: release.lua's reply to its
-- release (1, its session's id, or 0 when it was not held).
-- decodeReleaseGroup in scripts.go is the one reader of this reply.

-- (release.lua goes here as release_one: scripts.go)

local holder, out = ARGV[1], {}
for i = 1, #KEYS do
  local claim = ARGV[3 * i + 1]
  local rec = claim ~= '' and redis.call('HGET', KEYS[i], HOLDER .. holder)
  if claim ~= '' and not (rec and select(6, string.match(rec, GRANT_FORMAT)) == claim) then
    out[i] = 0
  else
    out[i] = release_one({KEYS[i]}, {holder, ARGV[3 * i - 1], ARGV[3 * i]})
  end
end
return out
