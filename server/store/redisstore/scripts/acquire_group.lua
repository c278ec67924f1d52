-- acquire_group.lua: grant every member of a group (names of one slot) or
-- none, queueing the group's waiter on every member when it waits.
--
-- Each member is decided as acquire.lua decides a single name, by that
-- script's own code: scripts.go puts acquire.lua's clock and data-loss
-- check first (once for the group), then the rest of acquire.lua as a
-- function acquire_one(KEYS, ARGV, MODE, CUR) (acquire.lua says what MODE
-- and CUR do), and release.lua as a function release_one(KEYS, ARGV) where
-- this script undoes grants. holders.lua comes first, after the settings
-- line.
--
-- KEYS per member i (1-based), from 3 * (i - 1) + 1: its lease, queue and
-- waiters (the name's keys, as the key layout in doc.go describes them);
-- then, last, the slot's data-loss marker.
-- ARGV[1] holder
-- ARGV[2] ttl (ms, >= 1); with a session, what the session's proof left
--         (remaining ms), as acquire.lua's ARGV[2]
-- ARGV[3] max holders (each member's, as acquire.lua's ARGV[6])
-- ARGV[4] session id to attach the grants to, or "" for grants of their own
--         TTL
-- ARGV[5] the session's ttl (ms), or ""
-- ARGV[6] proofs of sessions but the attaching one's (attached.lua), or ""
-- ARGV[7] waiter id, or "" for a group that does not wait
-- ARGV[8] waiter ttl (ms, >= 1), or ""
-- ARGV[9] the acquisition's claim: the value of every grant it makes or
--         renews (store.GroupRequest.Claim), as acquire.lua's ARGV[3]
-- ARGV[10..] per member: capacity, weight, name and, with a session, the
--         attach's time of the name (acquire.lua's ARGV[4], [5], [7] and
--         [10]): 3 arguments a member, 4 with a session; each name once
--         (a name listed twice is an error reply)
--
-- The group takes one state change: first every member is checked (MODE
-- 'check'); when one fails (another capacity, the holder cap, a detached
-- session, proofs needed) nothing is granted nor queued; when every one
-- would be granted or renewed, all are (acquire_one), each with a token
-- from its own name's counter; otherwise none is, and with a waiter the
-- group is queued on every member: the refused ones by the enqueue their
-- check handed back, the others by MODE 'queue'. A waiter queued on some
-- members but not on all (its place lapsed on one, its refreshes having
-- failed) is first taken out of every member's queue, so that it queues
-- again at the back of all of them: in one order with every other waiter
-- on each, else two groups could wait for each other for ever. The one
-- clock makes the grant pass decide as the checks did; were a member to
-- refuse there anyway, the grants this call made are released and its
-- answer returned.
--
-- Redis calls: an uncontended group of n names runs 2 (TIME, GET marker)
-- and an HMGET and an HSET a name (its check reads the name's fields, its
-- grant takes them from the check: acquire.lua's CUR), and a PEXPIREAT
-- where acquire.lua would run one: 2 + 2n where n acquires run 4n.
--
-- Returns, with lost as in acquire.lua's reply, and every time in unix ms
-- of Redis' clock:
--   {-1, lost, retry_after_ms}     quarantined
--   {-2, lost, i, capacity}        member i's name has another capacity
--   {-3, lost, i, max_holders}     member i's grant would pass ARGV[3]
--   {-4, lost, session_id...}      proofs of these sessions are needed first
--   {-5, lost, i}                  the session was detached from member i's
--                                  name after its attach: attach again
--   {1, lost, expires_ms, then per member: status, token, weight}
--                                  granted (status 2) or renewed (status 1:
--                                  the token and weight it holds), each until
--                                  expires_ms
--   {0, lost, then per member: status, holder, token, value, ttl_ms,
--    expires_ms, retry_at_ms, weight, session}
--                                  refused: status 1 for a member not in the
--                                  way (free, or held by ARGV[1]: the other
--                                  eight are "", "", "", 0, 0, 0, 0, ""), 0
--                                  for one in the way, with acquire.lua's
--                                  refusal of it
-- decodeAcquireGroup in scripts.go is the one reader of this reply.

-- (acquire.lua's head goes here: scripts.go)

-- (acquire_one goes here: scripts.go)

local holder, max_holders = ARGV[1], ARGV[3]
local sess, sess_ttl, proofs, waiter, waiter_ttl = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
-- The ttl converted once, not by each member's acquire_one.
local ttl_ms = tonumber(ARGV[2])
local stride = 3
if sess ~= '' then stride = 4 end
local count = (#ARGV - 9) / stride
-- Each member's KEYS and ARGV as acquire.lua takes them. A name listed
-- twice is an error: its grant would take the fields its check read (CUR)
-- after the other's grant changed them.
local keys, args, listed = {}, {}, {}
for i = 1, count do
  local k, a = 3 * (i - 1), 9 + stride * (i - 1)
  if listed[KEYS[k + 1]] then return redis.error_reply('acquire_group: a name listed twice: ' .. ARGV[a + 3]) end
  listed[KEYS[k + 1]] = true
  local at = ''
  if stride == 4 then at = ARGV[a + 4] end
  keys[i] = {KEYS[k + 1], KEYS[k + 2], KEYS[k + 3]}
  args[i] = {holder, ttl_ms, ARGV[9], ARGV[a + 1], ARGV[a + 2], max_holders, ARGV[a + 3], sess, sess_ttl, at, proofs,
    waiter, waiter_ttl}
end

-- 1. Check every member. A member's check hands back its fields as read
-- (would be granted at the fast path: its grant reads them no more) or its
-- enqueue (refused): extra[i].
local answers, extra, need, seen = {}, {}, nil, {}
local refused = false
for i = 1, count do
  local r, more = acquire_one(keys[i], args[i], 'check')
  local status = r[1]
  if status == -4 then
    need = need or {-4, lost}
    for f = 3, #r do
      if not seen[r[f]] then
        seen[r[f]] = true
        need[#need + 1] = r[f]
      end
    end
  elseif status == -2 or status == -3 then
    return {status, lost, i, r[3]}
  elseif status == -5 then
    return {-5, lost, i}
  end
  refused = refused or status == 0
  answers[i], extra[i] = r, more
end
if need then return need end

-- 2. Grant every member, when none is refused.
local queue = waiter ~= ''
if not refused then
  local reply = {1, lost, 0}
  for i = 1, count do
    local cur
    if answers[i][1] == 3 then cur = extra[i] end
    local r = acquire_one(keys[i], args[i], nil, cur)
    if r[1] == 2 then
      reply[3] = r[4]
      reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 2, r[3], args[i][5]
    elseif r[1] == 1 then
      reply[3] = r[7]
      reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = 1, r[4], r[9]
    else
      -- Not as checked: undo this call's grants (a renewal stays, as it
      -- would have stayed unrenewed) and answer as the member did; the
      -- waiter is not queued, the caller asks again.
      -- (release.lua goes here as release_one: scripts.go)
      for j = 1, i - 1 do
        if reply[1 + 3 * j] == 2 then
          release_one({keys[j][1]}, {holder, reply[2 + 3 * j], args[j][7]})
        end
      end
      if r[1] == -2 or r[1] == -3 then return {r[1], lost, i, r[3]} end
      if r[1] == -5 then return {-5, lost, i} end
      if r[1] == -4 then return r end
      answers[i], queue = r, false
      break
    end
  end
  if reply[1 + 3 * count] then return reply end
end

-- 3. Refused: queue the waiter on every member.
if queue then
  local live, present = 0, 0
  for i = 1, count do
    local deadline = redis.call('ZSCORE', keys[i][3], waiter)
    if deadline then
      present = present + 1
      if tonumber(deadline) >= now then live = live + 1 end
    end
  end
  if present > 0 and live < count then
    for i = 1, count do
      if redis.call('ZREM', keys[i][2], waiter) == 1 then
        redis.call('ZREM', keys[i][3], waiter)
        -- The waiters behind it may lead now.
        redis.call('PUBLISH', CHANNEL, args[i][7] .. '\n')
      end
    end
  end
  for i = 1, count do
    if answers[i][1] == 0 then
      extra[i]()
    else
      acquire_one(keys[i], args[i], 'queue')
    end
  end
end
local reply = {0, lost}
for i = 1, count do
  local r = answers[i]
  if r[1] == 0 then
    reply[#reply + 1] = 0
    for f = 3, 10 do reply[#reply + 1] = r[f] end
  else
    for _, v in ipairs({1, '', '', '', 0, 0, 0, 0, ''}) do reply[#reply + 1] = v end
  end
end
return reply
