-- watch.lua: mark a name as observed, so that its changes are announced.
--
-- KEYS[1] watched STRING; present (with a TTL) while some coordinator
--         observes the name
-- ARGV[1] how long the mark lasts (ms); the observer renews it well before
--
-- Returns 1.

redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return 1
