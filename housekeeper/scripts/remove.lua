-- remove.lua: removes messages from a queue's cache, as Deckard's remove
-- script does after they left its storage (TTL, max elements).
--
-- KEYS[1..6] the queue's six sets: <prefix>:queue:{Q}, :tmp, :lock_ack,
--            :lock_nack, :lock_ack:score, :lock_nack:score
-- ARGV       the message ids
--
-- Returns the number of members removed over all six sets (Deckard's count:
-- a locked message with a saved score counts twice).

local total = 0
local step = 1000 -- unpack() has a stack limit of a few thousand values
for _, key in ipairs(KEYS) do
  for i = 1, #ARGV, step do
    total = total + redis.call('ZREM', key, unpack(ARGV, i, math.min(i + step - 1, #ARGV)))
  end
end
return total
