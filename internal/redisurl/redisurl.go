package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Config is what a URL names: exactly one of its fields is set.
type Config struct {
	Standalone *redis.Options
	Sentinel   *redis.FailoverOptions
	Cluster    *redis.ClusterOptions
}

// NewClient builds the client for a standalone, Sentinel or Cluster URL.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	c, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Cluster != nil:
		return redis.NewClusterClient(c.Cluster), nil
	case c.Sentinel != nil:
		return redis.NewFailoverClient(c.Sentinel), nil
	default:
		return redis.NewClient(c.Standalone), nil
	}
}

// Parse parses the URL forms of the package documentation. Unless the URL
// asks for a protocol, the clients speak RESP2: with RESP3, go-redis looks
// for push notifications around every reply, which cost a lease service
// about a tenth of its throughput, and nothing here needs RESP3.
//
// The clients also honour their callers' context deadlines on the socket
// (go-redis' ContextTimeoutEnabled): without it a call to a Redis that hangs
// waits out the read timeout (5s) whatever its context says, and retries
// after it.
func Parse(rawURL string) (Config, error) {
	c, err := parse(rawURL)
	if err != nil {
		return c, err
	}
	if err := checkAddrs(c); err != nil {
		return Config{}, urlErr(rawURL, err)
	}
	resp2 := !strings.Contains(rawURL, "protocol=")
	switch {
	case c.Standalone != nil:
		c.Standalone.ContextTimeoutEnabled = true
		if resp2 {
			c.Standalone.Protocol = 2
		}
	case c.Sentinel != nil:
		c.Sentinel.ContextTimeoutEnabled = true
		if resp2 {
			c.Sentinel.Protocol = 2
		}
	case c.Cluster != nil:
		c.Cluster.ContextTimeoutEnabled = true
		if resp2 {
			c.Cluster.Protocol = 2
		}
	}
	return c, nil
}

// checkAddrs refuses a node address that is not host:port (a host of "]"
// passes url.Parse), so that a bad URL fails here rather than at the first
// dial.
func checkAddrs(c Config) error {
	var addrs []string
	switch {
	case c.Standalone != nil:
		if c.Standalone.Network == "unix" {
			return nil
		}
		addrs = []string{c.Standalone.Addr}
	case c.Sentinel != nil:
		addrs = c.Sentinel.SentinelAddrs
	case c.Cluster != nil:
		addrs = c.Cluster.Addrs
	}
	for _, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return fmt.Errorf("node address %q is not host:port", a)
		}
	}
	return nil
}

func parse(rawURL string) (Config, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return Config{}, fmt.Errorf("invalid Redis URL %s: no scheme", Redact(rawURL))
	}
	switch scheme = strings.ToLower(scheme); scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return Config{}, urlErr(rawURL, err)
		}
		return Config{Standalone: o}, nil
	case "redis+cluster", "rediss+cluster":
		u, err := multiHostURL(strings.TrimSuffix(scheme, "+cluster"), rest, "6379")
		if err != nil {
			return Config{}, urlErr(rawURL, err)
		}
		if strings.Trim(u.Path, "/") != "" {
			return Config{}, urlErr(rawURL, fmt.Errorf("a cluster URL has no path (Redis Cluster has only db 0)"))
		}
		u.Path = ""
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return Config{}, urlErr(rawURL, err)
		}
		return Config{Cluster: o}, nil
	case "redis+sentinel", "rediss+sentinel":
		u, err := multiHostURL(strings.TrimSuffix(scheme, "+sentinel"), rest, "26379")
		if err != nil {
			return Config{}, urlErr(rawURL, err)
		}
		o, err := sentinelOptions(u)
		if err != nil {
			return Config{}, urlErr(rawURL, err)
		}
		return Config{Sentinel: o}, nil
	default:
		return Config{}, fmt.Errorf("invalid Redis URL %s: unknown scheme %q "+
			"(want redis, rediss, unix, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster)",
			Redact(rawURL), scheme)
	}
}

// multiHostURL turns "[userinfo@]h1:p1,h2:p2/path?query" into a go-redis URL
// of the given scheme whose host is h1:p1, the others added as addr=
// parameters; hosts without a port get defPort.
func multiHostURL(scheme, rest, defPort string) (*url.URL, error) {
	hostEnd := strings.IndexAny(rest, "/?#")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	authority, tail := rest[:hostEnd], rest[hostEnd:]
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo, authority = authority[:at+1], authority[at+1:]
	}
	hosts := strings.Split(authority, ",")
	for i, h := range hosts {
		if h == "" {
			return nil, fmt.Errorf("empty host in %q", authority)
		}
		if bracketed := strings.HasPrefix(h, "["); (bracketed && strings.HasSuffix(h, "]")) || (!bracketed && !strings.Contains(h, ":")) {
			hosts[i] = h + ":" + defPort
		}
	}
	u, err := url.Parse(scheme + "://" + userinfo + hosts[0] + tail)
	if err != nil {
		return nil, err
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("unexpected fragment %q", u.Fragment)
	}
	q := u.Query()
	for _, h := range hosts[1:] {
		q.Add("addr", h)
	}
	u.RawQuery = q.Encode()
	return u, nil
}

// sentinelOptions reads a redis(s)://[user:pass@]sentinel[?addr=...] URL
// whose path is /mastername[/db]. userinfo authenticates to the master and
// replicas; the sentinel_username and sentinel_password options to the
// sentinels.
func sentinelOptions(u *url.URL) (*redis.FailoverOptions, error) {
	parts := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' })
	if len(parts) == 0 || len(parts) > 2 {
		return nil, fmt.Errorf("a sentinel URL's path is /mastername[/db]")
	}
	master := parts[0]
	q := u.Query()
	if q.Has("master_name") {
		return nil, fmt.Errorf("the master name goes in the path, not in master_name=")
	}
	q.Set("master_name", master)
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	user, pass := "", ""
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
	}
	g := *u
	g.User = nil
	g.Path = ""
	if len(parts) == 2 {
		g.Path = "/" + parts[1]
	}
	g.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(g.String())
	if err != nil {
		return nil, err
	}
	o.Username, o.Password = user, pass
	o.SentinelUsername, o.SentinelPassword = sentUser, sentPass
	if o.SentinelPassword == "" {
		o.SentinelUsername = ""
	}
	return o, nil
}

func urlErr(rawURL string, err error) error {
	// A *url.Error quotes the URL it could not parse, password included:
	// keep only what went wrong, after the redacted URL.
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		err = fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return fmt.Errorf("invalid Redis URL %s: %w", Redact(rawURL), err)
}

// Redact hides a URL's passwords: the userinfo's, and the value of every
// query option whose name contains "password" (sentinel_password). It works
// on the text as written, so it copes with what url.Parse rejects
// (multi-host URLs, bad ports, bad escapes) and keeps the options in order.
func Redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return "<invalid URL>"
	}
	hostEnd := strings.IndexAny(rest, "/?#")
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	authority, tail := rest[:hostEnd], rest[hostEnd:]
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		user, _, hasPass := strings.Cut(authority[:at], ":")
		if hasPass {
			authority = user + ":xxxxx" + authority[at:]
		}
	}
	tail, fragment, hasFragment := strings.Cut(tail, "#")
	if path, query, hasQuery := strings.Cut(tail, "?"); hasQuery {
		opts := strings.Split(query, "&")
		for i, opt := range opts {
			key, _, hasValue := strings.Cut(opt, "=")
			name, err := url.QueryUnescape(key)
			if err != nil {
				name = key
			}
			if hasValue && strings.Contains(strings.ToLower(name), "password") {
				opts[i] = key + "=xxxxx"
			}
		}
		tail = path + "?" + strings.Join(opts, "&")
	}
	if hasFragment {
		tail += "#" + fragment
	}
	return scheme + "://" + authority + tail
}
