-- recovery_advance.lua: moves Deckard's recovery breakpoint, fenced and
-- compare-and-set, so that an instance deposed mid-recovery can never move
-- it again once its successor has acted.
--
-- KEYS[1] fence               <prefix>:housekeeper:{recovery_storage_breakpoint}:fence  STRING highest token seen
-- KEYS[2] storage breakpoint  <prefix>:{recovery_storage_breakpoint}     STRING last _id copied (hex), or "recovery_finished"
-- ARGV[1] fencing token: decimal, no leading zeros, at most 20 digits (uint64)
-- ARGV[2] the breakpoint the caller read ("" for none)
-- ARGV[3] the new breakpoint ("" only takes the fence)
--
-- Returns 1. Returns the error "FENCED <highest>" when ARGV[1] is below the
-- token in KEYS[1] (an equal or higher one is stored), and "MOVED <current>"
-- when the breakpoint is no longer ARGV[2]; either changes nothing else.
-- Both keys share the hash tag {recovery_storage_breakpoint}: one slot.

-- fence.lua, prepended to this script, has checked the token.

local current = redis.call('GET', KEYS[2]) or ''
if current ~= ARGV[2] then
  return redis.error_reply('MOVED ' .. current)
end
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[2], ARGV[3])
end
return 1
