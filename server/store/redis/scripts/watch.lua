-- watch.lua: mark a name as observed, so that its changes are announced;
-- scripts.go prepends it to describe.lua, so that an observer marks and
-- reads the name in one call, and the reply is describe.lua's.
--
-- KEYS[4] watched: the name's watched key, as the key layout in doc.go
-- describes it (KEYS[1..3] are describe.lua's).
-- ARGV[1] how long the mark lasts (ms); the observer renews it well before

redis.call('SET', KEYS[4], '1', 'PX', ARGV[1])
