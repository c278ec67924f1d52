// Package redisurl turns one URL into a go-redis client for any Redis
// deployment, so that every binary accepts the same forms:
//
//	redis://[user:pass@]host[:port][/db][?option=value...]        standalone
//	rediss://...                                                   standalone over TLS
//	unix://[user:pass@]/path/to/redis.sock[?db=N]                  standalone over a socket
//	redis+sentinel://[user:pass@]host1[:port],host2[:port]/mastername[/db][?option=value...]
//	rediss+sentinel://...                                          Sentinel, TLS to every node
//	redis+cluster://[user:pass@]host1[:port],host2[:port][?option=value...]
//	rediss+cluster://...                                           Cluster over TLS
//
// Options are go-redis' URL options (redis.ParseURL, redis.ParseFailoverURL,
// redis.ParseClusterURL), e.g. dial_timeout=3s&read_timeout=2s&pool_size=50.
// Standalone and cluster ports default to 6379, sentinel ports to 26379. In a
// sentinel URL user:pass authenticate to the master and replicas; the
// sentinels' own credentials, if any, go in the sentinel_username and
// sentinel_password options.
//
// It is a leaf, like every package in internal/: it imports nothing of this
// module.
package redisurl
