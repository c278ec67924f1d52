-- acquire.lua: grant a share of a name (a lease of its own), renew it for
-- its holder, or queue a waiter.
--
-- KEYS[1] lease, KEYS[2] queue, KEYS[3] waiters, KEYS[4] marker (the name's
-- data-loss marker): the name's keys, as the key layout in doc.go describes
-- them. holders.lua comes first (scripts.go): the grant records and the
-- weights in queue scores; marker.lua, the data-loss check, at its line;
-- grants.lua after the uncontended path.
-- ARGV[1] holder
-- ARGV[2] ttl (ms, >= 1)
-- ARGV[3] value
-- ARGV[4] capacity (1 .. store.MaxCapacity) the caller expects the name to
--         have
-- ARGV[5] weight (1 .. capacity) to hold (ARGV[4] and ARGV[5] are decimal
--         strings too: the uncontended grant stores them as they came,
--         formatting no numbers but the token and the expiry)
-- ARGV[6] max holders: the most grants (lock delays included) the name may
--         carry at once
-- ARGV[7] name (announced on the channel: the name and a newline, and the
--         token after it for a grant, as doc.go's key layout says)
-- ARGV[8] session id to attach the grant to, or "" for a grant of its own
--         TTL; with one, ARGV[2] is what the session's proof left
--         (remaining ms): the grant's bound (attached.lua)
-- ARGV[9] the session's ttl (ms): an attached grant's recorded ttl
-- ARGV[10] the attach's time (ms of the session slot's clock, as the
--          session's names recorded it: session.lua): a grant of a session
--          detached from the name since ('d:' .. session, settle.lua) is
--          refused while the detach's mark lasts
-- ARGV[11] proofs of sessions (attached.lua) but the attaching one's: the
--          script makes that from ARGV[2] (what its proof left), when it
--          needs it (an attached grant's bound passed)
-- ARGV[12] waiter id, or "" for a caller that does not wait
-- ARGV[13] waiter ttl (ms, >= 1)
-- ARGV[14] token (decimal) the caller must hold the name under, or "": with
--          it the call only renews that grant, and is otherwise refused
--          (status 0, no holder) without a grant or a place in the queue
-- ARGV[15] "1" to keep the stored value when ARGV[1] already holds the name
--          (a lock call on an election's name), else ""
--
-- The arguments from ARGV[8] on are left out after the last one that is not
-- "" (acquireArgs.argv): an absent one reads as "". A grant of its own that
-- does not wait sends 7 arguments, an attached one 10; each argument costs
-- Redis about 1k instructions at every call.
--
-- The store's settings are constants of its copy of the script (scripts.go
-- puts them first), not arguments, since each argument costs Redis a string
-- at every call and converting it a number: CHANNEL, the store's pub/sub
-- channel; QUARANTINE (ms, 0 disables);
-- LOCK_DELAY (ms): how long a grant that expired (was not released) keeps
-- its weight from being granted again; IDLE, the idle retention (ms): how
-- long the lease key outlives the grants and their lock delay, keeping the
-- fencing counter; KEEP (ms): how long it outlives attached grants' bounds
-- and lock delay instead.
--
-- Grants attached to sessions are trusted only until their bounds
-- (attached.lua): when one passed, the script first settles them with the
-- proofs given, and when a proof it needs is missing it answers
-- {-4, lost, session_id...}, having changed nothing but the data-loss
-- marker, for the caller to ask those sessions' slots and call again.
--
-- A grant needs used + (the weights of the live waiters queued ahead of the
-- caller) + weight <= capacity: a waiter passes the ones ahead only when
-- they would fit too, and a caller that does not wait is refused while any
-- live waiter waits. The grants' records are read (HGETALL) only when the
-- summary fields say one may have run out (now >= low + lock delay) or a
-- refusal must name a holder.
--
-- Redis calls: an uncontended grant runs 4 (TIME, GET marker, HMGET,
-- HSET), and PEXPIREAT when the key's expiry must move ('ex', below: about
-- once per eighth of a retention); it ran 5, PEXPIRE always, before 'ex'.
-- A grant attached to a session costs the same (its record names the
-- session, the summary its bound), but its key must outlive it by KEEP, which the last
-- attached release takes back to IDLE unless the name is hot ('hot', set
-- when a name is granted again within a retention of its last grant): so
-- a name used once in a session runs PEXPIREAT at its grant and at its
-- release, and a name locked again and again no more often than a lease
-- of its own does. A renewal by the holder 4 or 5 the same way; a refusal without waiting of
-- an exclusive lock 4 (TIME, GET, HMGET, HGETALL to name the holder), on
-- a short path (0b) when one live grant holds it and nothing else needs
-- doing: 115k instructions against 195k before it (an uncontended grant
-- 93k, a refused SET NX 23k: scripts/callgrind-cycle.sh).
--
-- Returns, with lost = 1 when this call found the marker missing (Redis lost
-- its data), else 0, and every time in unix ms of Redis' clock:
--   {-1, lost, retry_after_ms}                                       quarantined
--   {-2, lost, capacity}       the name has another capacity, held or awaited
--   {-3, lost, max_holders}    the grant would take the name past ARGV[6]
--   {-4, lost, session_id...}  proofs of these sessions are needed first
--   {-5, lost}                 the session was detached from the name after
--                              the attach ARGV[10]: attach again
--   {2, lost, token, expires_ms}  granted to ARGV[1] as asked (a new grant:
--                              its value, weight, session and ttl, ARGV[9]
--                              when attached, are the call's)
--   {status, lost, holder, token, value, ttl_ms, expires_ms, retry_at_ms, weight, session}
-- status 1: renewed for ARGV[1]; 0: refused. holder .. expires_ms
-- weight and session (its id, or "") are the grant, or, refused, the live
-- grant that ends first ("", "", "", 0, 0, 0 and "" when there is none: the weight is in lock delays,
-- or older waiters come first); token is a decimal string, and so are
-- ttl_ms .. weight in the short refusal (0b). retry_at_ms, when
-- refused, is the earliest some weight may come free: the end of a grant or
-- of a lock delay; 0 when the grant waits for older waiters instead, and
-- when granted. decodeAcquire in scripts.go is the one reader of this reply.

-- MODE and CUR are nil here: this script grants. acquire_group.lua makes
-- the part after the acquire_one line below a function of its own,
-- acquire_one(KEYS, ARGV, MODE, CUR), whose arguments stand for these, and
-- calls it once per member: MODE 'check' answers {3, lost} where this
-- script would grant or renew, and a refusal as this script would refuse,
-- but without queueing the waiter: its enqueue function comes back as a
-- second value, for the group to call once no member failed; at the fast
-- path (0. below) the second value is the name's fields as read (cur),
-- which the grant that follows takes as CUR instead of reading them again.
-- MODE 'queue' neither grants nor renews but refuses, queueing the waiter,
-- and skips the fast path. The part before that line (the clock and the
-- data-loss check) runs once per script, a group's too: its marker key is
-- the last of KEYS.
local MODE, CUR

-- Redis' time, from one conversion (each costs Redis about 1.7k
-- instructions): clock in microseconds and now_ms in milliseconds as
-- decimal strings, now as a number.
local time = redis.call('TIME')
local us = time[2]
if #us < 6 then us = string.rep('0', 6 - #us) .. us end
local clock = time[1] .. us
local now_ms = string.sub(clock, 1, -4)
local now = tonumber(now_ms)

-- 1. Data loss.
local marker, quarantine = KEYS[#KEYS], QUARANTINE
-- (marker.lua goes here: scripts.go)

-- (acquire_one starts here: scripts.go)
local lease, queue, waiters = KEYS[1], KEYS[2], KEYS[3]
local holder, value, expected, sess = ARGV[1], ARGV[3], ARGV[14] or '', ARGV[8] or ''
local ttl = tonumber(ARGV[2])
local field = HOLDER .. holder

-- 'token' is the last token issued: it stays when the grants end, as the
-- name's fencing counter. 'sum' summarises the grant records, live or in
-- their lock delay (holders.lua): their number, the sum of their weights,
-- at most the earliest expiry among them and at least the latest, and at
-- most the earliest bound of those attached to sessions (slow); it is
-- absent while there is none. 'ex' is the key's expiry as the scripts last
-- set it (see keep_key). 'd:' .. session is 'T:until' when the session was
-- detached from the name at T (settle.lua): until then (this clock) a
-- grant attached to it by an attach at or before T would be missing from
-- its names, where its close and refresh find it, so the caller attaches
-- again.
-- (CUR, from a group's check of this name, is what these read: the
-- check changed nothing, since it ended at the fast path.)
local cur = CUR
if cur then
elseif sess == '' then
  cur = redis.call('HMGET', lease, 'token', 'cap', 'sum', 'queued', 'watched', field, 'ex')
else
  cur = redis.call('HMGET', lease, 'token', 'cap', 'sum', 'queued', 'watched', field, 'ex', 'd:' .. sess)
  if cur[8] then
    local t, u = string.match(cur[8], '^(%d+):(%d+)$')
    if t and tonumber(u) > now and tonumber(t) >= tonumber(ARGV[10]) then return {-5, lost} end
  end
end

-- The next token: the counter plus one, but never below the clock in
-- microseconds: a counter that is gone (the name was idle past its
-- retention, or data loss) or behind (a failover to a replica that missed
-- the last grants) still yields a token above every one issued before, as
-- long as the clock does not step back. A decimal string. Both are
-- compared as decimal strings without leading zeros (longer is larger):
-- converting numbers is most of what the uncontended grant costs Redis.
-- A value, not a function: a call grants once at most, and each function a
-- script defines costs Redis at every call.
local next_token = clock
if cur[1] and (#cur[1] > #clock or (#cur[1] == #clock and cur[1] >= clock)) then
  local n = tonumber(cur[1])
  if n then next_token = ms(n + 1) end
end

-- 0. Nobody holds (not even in a lock delay), queues for the name or
-- observes it, and the caller asks for a grant of its own: grant at once,
-- taking the request's capacity. This is 5. below with nothing to sweep,
-- prune or count and no one to tell, in fewer commands and with the fields
-- written as they came: the uncontended lock. The key must outlive the
-- grant by the lock delay and the retention; 'ex' says when it
-- already does, so that PEXPIREAT runs about once per eighth of a
-- retention.
local free = not cur[3] and cur[4] ~= '1' and expected == '' and (not cur[5] or tonumber(cur[5]) <= now)
if free and MODE then
  if MODE == 'check' then return {3, lost}, cur end
  free = false -- 'queue': the slow path refuses
end
if free and sess ~= '' then
  -- The same, attached to the caller's session (ttl is what its proof
  -- left): the record names the session and has its ttl, the summary
  -- has its bound as the earliest (slow, attached.lua), and the key
  -- outlives the bound by KEEP.
  local token = next_token
  local expires = ms(now + ttl)
  local need = now + ttl + LOCK_DELAY + KEEP
  local fields = {field, pack_grant(token, ARGV[5], ARGV[9], expires, sess, value), 'token', token,
    'sum', '1:' .. ARGV[5] .. ':' .. expires .. ':' .. expires .. ':' .. expires}
  if (cur[2] or '1') ~= ARGV[4] then
    fields[#fields + 1], fields[#fields + 2] = 'cap', ARGV[4]
  end
  local at
  if not (cur[7] and tonumber(cur[7]) >= need) then
    at = ms(need + math.floor(KEEP / 8))
    fields[#fields + 1], fields[#fields + 2] = 'ex', at
    -- A name granted again within a retention of its last grant is in
    -- use: 'hot' keeps its key KEEP ahead at the releases of its attached
    -- grants (release.lua), so that a name locked again and again in
    -- sessions moves no expiry; a name used once goes back to IDLE when
    -- released. (The last token is at most the clock in microseconds of
    -- the last grant, or ahead of it: then the name counts as hot.)
    if cur[1] and tonumber(cur[1]) >= (now - IDLE) * 1000 then
      fields[#fields + 1], fields[#fields + 2] = 'hot', '1'
    end
  end
  redis.call('HSET', lease, unpack(fields))
  if at then redis.call('PEXPIREAT', lease, at) end
  return {2, lost, token, now + ttl}
end
if free then
  local token = next_token
  local expires = ms(now + ttl)
  local record = pack_grant(token, ARGV[5], ARGV[2], expires, '', value)
  local sum = '1:' .. ARGV[5] .. ':' .. expires .. ':' .. expires
  local need = now + ttl + LOCK_DELAY + IDLE
  if cur[7] and tonumber(cur[7]) >= need then
    if (cur[2] or '1') == ARGV[4] then
      redis.call('HSET', lease, field, record, 'token', token, 'sum', sum)
    else
      redis.call('HSET', lease, field, record, 'token', token, 'sum', sum, 'cap', ARGV[4])
    end
  else
    local at = ms(need + math.floor(IDLE / 8))
    local fields = {field, record, 'token', token, 'sum', sum, 'ex', at}
    if (cur[2] or '1') ~= ARGV[4] then
      fields[#fields + 1], fields[#fields + 2] = 'cap', ARGV[4]
    end
    redis.call('HSET', lease, unpack(fields))
    redis.call('PEXPIREAT', lease, at)
  end
  return {2, lost, token, now + ttl}
end

-- 0b. Held by one live grant of another holder, an exclusive lock, asked
-- for without waiting: refused, naming that grant, as 5. below would
-- refuse it, but without its locals, functions and conversions: a busy
-- lock's TryLock is refused many times per grant, and each of those cost
-- Redis twice an uncontended grant. Nothing here may change: nobody is
-- queued (no dead waiter to drop), the summary is exact and live (nothing
-- to sweep) and no attached grant is past its bound (nothing to settle).
-- Times are compared as decimal strings of the same clock (longer is
-- larger), and the reply passes the record's fields on as strings.
if cur[3] and (ARGV[12] or '') == '' and expected == '' and cur[4] ~= '1' and not cur[6] and ARGV[4] == '1' and (cur[2] or '1') == '1' then
  local n, used, low, high, slow = string.match(cur[3], SUM_FORMAT)
  if n == '1' and used == '1' and low == high and (#high > #now_ms or (#high == #now_ms and high > now_ms))
    and (slow == '' or #slow > #now_ms or (#slow == #now_ms and slow > now_ms)) then
    local all = redis.call('HGETALL', lease)
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == HOLDER then
        local token, weight, rec_ttl, expires, session, rec_value = string.match(all[i + 1], GRANT_FORMAT)
        if expires == high then
          return {0, lost, string.sub(all[i], 3), token, rec_value, rec_ttl, expires, expires, weight, session}
        end
        break
      end
    end
  end
end

-- (holders.lua's decoders go here: scripts.go)

local waiter, channel, name = ARGV[12] or '', CHANNEL, ARGV[7]
local delay, keep_value, idle = LOCK_DELAY, ARGV[15] == '1', IDLE
-- (ARGV[6] and ARGV[13] are converted where used: each conversion costs
-- Redis about 1.7k instructions.)
local capacity, weight = tonumber(ARGV[4]), tonumber(ARGV[5])
local cap_now = tonumber(cur[2]) or 1
local n, used, low, high, slow = unpack_sum(cur[3])
local queued, watched = cur[4] == '1', tonumber(cur[5]) or 0
local mine = unpack_grant(holder, cur[6])
local ex = tonumber(cur[7])
local mine_live = mine and mine.expires > now
local stale = slow and now >= slow
if expected ~= '' and not stale and not (mine_live and mine.token == expected) then
  return {0, lost, '', '', '', 0, 0, 0, 0, ''}
end

-- (grants.lua goes here: scripts.go)

-- 1. Sessions: no attached grant is trusted past its bound. Settling may
-- end some (a closed session's are released: announced below).
local keep, rec_ttl = idle, ttl
if sess ~= '' then rec_ttl = tonumber(ARGV[9]) end
local settled_ended = false
if stale then
  -- (attached.lua goes here: scripts.go)
  local proofs = parse_proofs(ARGV[11] or '')
  if sess ~= '' then proofs[sess] = {kind = 'a', n = ttl} end
  local need, ended = settle(lease, now, proofs, delay, KEEP)
  if need then
    table.insert(need, 1, lost)
    table.insert(need, 1, -4)
    return need
  end
  settled_ended = ended
  cur = redis.call('HMGET', lease, 'token', 'cap', 'sum', 'queued', 'watched', field, 'ex')
  cap_now = tonumber(cur[2]) or 1
  n, used, low, high, slow = unpack_sum(cur[3])
  queued, watched = cur[4] == '1', tonumber(cur[5]) or 0
  mine = unpack_grant(holder, cur[6])
  ex = tonumber(cur[7])
  mine_live = mine and mine.expires > now
  if expected ~= '' and not (mine_live and mine.token == expected) then
    if settled_ended and (queued or watched > now) then redis.call('PUBLISH', channel, name .. '\n') end
    return {0, lost, '', '', '', 0, 0, 0, 0, ''}
  end
end
-- While grants are attached, the key outlives them by KEEP: their
-- bounds may be stale, and their sessions' renewals refresh them only
-- that often.
if slow or sess ~= '' then keep = KEEP end

-- The lease key outlives the last grant by the lock delay and the idle
-- retention (keep), and the name's observation mark. A script that must
-- move the key's expiry sets it an eighth of a retention past what it
-- needs and records it in 'ex', so that later calls whose needs it covers,
-- by no more than a quarter of a retention, skip the PEXPIREAT: the key
-- outlives each need by up to a quarter of a retention more. keep_key
-- adds 'ex' to fields (those of the HSET about to run) and returns the
-- expiry to set, or nil.
local function keep_key(fields)
  local last = high + delay + keep
  if watched > last then last = watched end
  if ex and ex >= last and ex <= last + keep / 4 then return nil end
  local at = ms(last + math.floor(keep / 8))
  fields[#fields + 1], fields[#fields + 2] = 'ex', at
  return at
end

-- Grants weight to ARGV[1] beside the other grants and returns the token.
local function grant()
  local token = next_token
  local expires = now + ttl
  used, n = used + weight, n + 1
  if not low or expires < low then low = expires end
  if expires > high then high = expires end
  -- Attached to its session (its record names it): slow is at most its
  -- bound.
  if sess ~= '' and (not slow or expires < slow) then slow = expires end
  local fields = {field, pack_grant(token, weight, rec_ttl, expires, sess, value), 'token', token,
    'sum', pack_sum(n, used, low, high, slow)}
  if (cur[2] or '1') ~= ARGV[4] then
    fields[#fields + 1], fields[#fields + 2] = 'cap', ARGV[4]
  end
  local at = keep_key(fields)
  redis.call('HSET', lease, unpack(fields))
  if at then redis.call('PEXPIREAT', lease, at) end
  return token
end

-- Announces a change of the name on the channel, when anyone listens: a
-- queued waiter or an observer. Uncontended locks then cost no pub/sub
-- traffic at all. granted is the token of the grant this call made, the
-- news it announces: whatever else changed before it led to that grant.
local function announce(granted)
  settled_ended = false
  if queued or watched > now then
    redis.call('PUBLISH', channel, name .. '\n' .. (granted or ''))
  end
end

local function unqueue()
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', waiters, waiter)
end

if mine_live and MODE ~= 'queue' then
  -- 2. Held by the caller: renew, keeping the token and the weight. (MODE
  -- 'queue' goes on, to be refused at 5.: its own grant is in the way.)
  if capacity ~= cap_now then return {-2, lost, cap_now} end
  if MODE then
    if settled_ended then announce() end
    return {3, lost}
  end
  if keep_value then value = mine.value end
  local expires = now + ttl
  if n <= 1 or expires > high then high = expires end
  if not low or expires < low then low = expires end
  if sess ~= '' and (not slow or expires < slow) then slow = expires end
  local fields = {field, pack_grant(mine.token, mine.weight, rec_ttl, expires, sess, value), 'sum', pack_sum(n, used, low, high, slow)}
  local at = keep_key(fields)
  redis.call('HSET', lease, unpack(fields))
  if at then redis.call('PEXPIREAT', lease, at) end
  if waiter ~= '' then unqueue() end
  if mine.value ~= value or settled_ended then announce() end
  return {1, lost, holder, mine.token, value, rec_ttl, expires, 0, mine.weight, sess}
end

-- 3. Sweep: some grant may have run out past its lock delay. Drop those,
-- giving their weight back, and set the summary fields exactly.
local all
if low and now >= low + delay then
  all = redis.call('HGETALL', lease)
  local gone = {}
  used, n, low, high = 0, 0, nil, 0
  each_grant(all, function(g)
    if g.expires + delay <= now then
      gone[#gone + 1] = HOLDER .. g.holder
    else
      used, n = used + g.weight, n + 1
      if not low or g.expires < low then low = g.expires end
      if g.expires > high then high = g.expires end
    end
  end)
  for i = 1, #gone, 500 do
    redis.call('HDEL', lease, unpack(gone, i, math.min(i + 499, #gone)))
  end
  if n == 0 then
    redis.call('HDEL', lease, 'sum')
  else
    redis.call('HSET', lease, 'sum', pack_sum(n, used, low, high, slow))
  end
  if mine and mine.expires + delay <= now then mine = nil end
end

-- Drops waiters whose deadline passed (a bounded batch; the head is checked
-- again below); returns how many.
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', waiters, '-inf', '(' .. ms(now), 'LIMIT', 0, 100)
  if #gone > 0 then
    redis.call('ZREM', waiters, unpack(gone))
    redis.call('ZREM', queue, unpack(gone))
  end
  return #gone
end

-- 4. Waiters: drop the dead ones at the head, so that a live one leads.
local pruned, head = 0, nil
if queued then
  pruned = prune()
  while true do
    head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then break end
    local deadline = redis.call('ZSCORE', waiters, head)
    if deadline and tonumber(deadline) >= now then break end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', waiters, head)
    pruned = pruned + 1
  end
  if not head then
    -- Nobody waits any more: the uncontended path may grant again.
    queued = false
    redis.call('HDEL', lease, 'queued')
  end
end

if capacity ~= cap_now then
  if n > 0 or head then
    if pruned > 0 or settled_ended then announce() end
    return {-2, lost, cap_now}
  end
  cap_now = capacity
end

-- Queues the waiter behind the last one (keeping its place, and the weight
-- it arrived with, if queued) and pushes its deadline out; the queue keys
-- expire with their last deadline. The lease key's 'queued' flag tells the
-- uncontended path to look, and the lease key outlives the deadline. A
-- name nobody holds takes the waiter's capacity ('cap'), as a grant would
-- give it: a group queues on its free members too.
local function enqueue()
  if not redis.call('ZSCORE', queue, waiter) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    local order = 1
    if last[2] then order = math.floor(tonumber(last[2]) / WEIGHT_SPAN) + 1 end
    redis.call('ZADD', queue, ms(order * WEIGHT_SPAN + weight), waiter)
  end
  redis.call('ZADD', waiters, ms(now + tonumber(ARGV[13])), waiter)
  local latest = tonumber(redis.call('ZRANGE', waiters, -1, -1, 'WITHSCORES')[2])
  redis.call('PEXPIREAT', queue, ms(latest))
  redis.call('PEXPIREAT', waiters, ms(latest))
  local take = (cur[2] or '1') ~= ARGV[4]
  if take then cur[2] = ARGV[4] end
  if not queued then
    queued = true
    if take then
      redis.call('HSET', lease, 'queued', '1', 'cap', ARGV[4])
    else
      redis.call('HSET', lease, 'queued', '1')
    end
  elseif take then
    redis.call('HSET', lease, 'cap', ARGV[4])
  end
  local pttl = redis.call('PTTL', lease)
  if pttl < 0 or now + pttl < latest then
    redis.call('PEXPIREAT', lease, ms(latest))
  end
end

-- Refuses the caller, queueing it when it waits. The reply names f, the
-- live grant that ends first, when there is one to name.
local function refuse(retry_at, f)
  local later
  if waiter ~= '' then
    if MODE == 'check' then later = enqueue else enqueue() end
  end
  -- The head may not know that it is now first in line.
  if pruned > 0 or settled_ended then announce() end
  if f then return {0, lost, f.holder, f.token, f.value, f.ttl, f.expires, retry_at, f.weight, f.session}, later end
  return {0, lost, '', '', '', 0, 0, retry_at, 0, ''}, later
end

-- 5. The caller's own grant in its lock delay keeps its weight: it waits
-- as anyone would.
if mine then
  return refuse(mine.expires + delay, nil)
end
if used + weight > cap_now then
  -- The next weight comes free at the earliest end of a live grant, or of
  -- a lock delay; the reply names the live grant that ends first. One
  -- pass: decoding a record is a pattern match, three conversions and a
  -- table, and a full semaphore has a record per holder.
  if not all then all = redis.call('HGETALL', lease) end
  local at, first
  each_grant(all, function(g)
    local e = g.expires
    if e > now and (not first or e < first.expires) then first = g end
    if e <= now then e = e + delay end
    if e > now and (not at or e < at) then at = e end
  end)
  return refuse(at or 0, first)
end
if head and head ~= waiter then
  -- 6. Live waiters: the caller passes those ahead of it only when they
  -- would all fit beside it; one that does not wait passes none. The head
  -- of the queue (the next waiter of a handoff) has nobody ahead, and
  -- reads no batch of the queue: one would cost Redis as much as the rest
  -- of the grant with a long queue.
  local room = cap_now - used - weight
  local fits = waiter ~= ''
  local ahead, from, done = 0, 0, false
  while fits and not done do
    local batch = redis.call('ZRANGE', queue, from, from + 99, 'WITHSCORES')
    if #batch == 0 then break end
    for i = 1, #batch, 2 do
      if batch[i] == waiter then
        done = true
        break
      end
      local deadline = redis.call('ZSCORE', waiters, batch[i])
      if deadline and tonumber(deadline) >= now then
        ahead = ahead + queue_weight(batch[i + 1])
        if ahead > room then
          fits = false
          break
        end
      end
    end
    from = from + 100
  end
  if not fits then return refuse(0, nil) end
end
local max_holders = tonumber(ARGV[6])
if n >= max_holders then
  if pruned > 0 or settled_ended then announce() end
  return {-3, lost, max_holders}
end

if MODE then
  if MODE == 'queue' then return refuse(0, nil) end
  if pruned > 0 or settled_ended then announce() end
  return {3, lost}
end
local token = grant()
if waiter ~= '' then unqueue() end
announce(token)
return {2, lost, token, now + ttl}
