-- watch.lua: mark a name as observed, so that its changes are announced;
-- scripts.go prepends it to describe.lua, so that an observer marks and
-- reads the name in one call.
--
-- KEYS[4] watched STRING; present (with a TTL) while some coordinator
--         observes the name (KEYS[1..3] are describe.lua's)
-- ARGV[1] how long the mark lasts (ms); the observer renews it well before

redis.call('SET', KEYS[4], '1', 'PX', ARGV[1])
