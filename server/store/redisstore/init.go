package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

// ErrNotNew is what Init refuses a Redis with: its data-loss markers, or
// other keys of the prefix, exist.
var ErrNotNew = errors.New("redisstore: this Redis is not new to the coordinators")

// Init prepares a brand-new Redis for the coordinators, once, before the
// first one starts: it writes the data-loss markers that a coordinator's
// start would otherwise find missing and read as data lost while none ran
// (which makes a new deployment's first start wait out a quarantine). It
// writes them as New does with Options.NewStore, through the same script,
// and returns how many it wrote: 1, or 16384 on a Cluster (a marker per
// slot).
//
// Init refuses, writing nothing and returning an error that wraps
// ErrNotNew, when any marker of the prefix exists (the store was
// initialised, or coordinators have run on it) or when any other key of the
// prefix does (a store in use whose markers are gone: its data was partly
// lost, and the coordinators must quarantine when they start, which
// writing the markers here would prevent).
//
// What Init cannot tell apart is a brand-new Redis and one that lost every
// key of the prefix after being used: both have nothing. Run it only on a
// Redis that was just created (a Helm pre-install hook does), never to
// "repair" one: after a loss, coordinators that start without it quarantine
// grants as they should.
//
// Options other than KeyPrefix, CallTimeout and Logger play no part.
func Init(ctx context.Context, client redis.UniversalClient, opts Options) (int64, error) {
	s, err := build(client, opts)
	if err != nil {
		return 0, err
	}
	if err := s.Ping(ctx); err != nil {
		return 0, err
	}
	if err := s.checkVersion(ctx); err != nil {
		return 0, err
	}
	s.checkEvictionPolicy(ctx)
	total := int64(1)
	if s.cluster {
		total = numSlots
	}
	existing, err := s.existingMarkers(ctx)
	if err != nil {
		return 0, err
	}
	if existing > 0 {
		return 0, fmt.Errorf("%w: %d of its %d data-loss markers under the prefix %q exist, so it was initialised or coordinators have run on it "+
			"(a coordinator starting on it needs nothing more)", ErrNotNew, existing, total, s.prefix)
	}
	key, err := s.anyNameKey(ctx)
	if err != nil {
		return 0, err
	}
	if key != "" {
		return 0, fmt.Errorf("%w: it holds keys under the prefix %q (%s) but no data-loss marker, so it was in use and lost data; "+
			"start the coordinators without initialising it, and they refuse grants for the quarantine as they must", ErrNotNew, s.prefix, key)
	}
	written, err := s.writeMarkers(ctx, true)
	if err != nil {
		return written, err
	}
	if written < total {
		return written, fmt.Errorf("%w: %d of the %d markers appeared while it was being initialised: a coordinator started meanwhile, "+
			"and the markers it wrote stay as it wrote them", ErrNotNew, total-written, total)
	}
	s.log.Info("initialised a new store: wrote the data-loss markers", "prefix", s.prefix, "markers", written)
	return written, nil
}

// InitFromURL is Init on the Redis deployment that rawURL names (see
// NewFromURL).
func InitFromURL(ctx context.Context, rawURL string, opts Options) (int64, error) {
	client, err := redisurl.NewClient(rawURL)
	if err != nil {
		return 0, err
	}
	defer func() { _ = client.Close() }()
	return Init(ctx, client, opts)
}

// existingMarkers counts the data-loss markers that exist.
func (s *Store) existingMarkers(ctx context.Context) (int64, error) {
	if !s.cluster {
		cctx, cancel := s.bound(ctx)
		defer cancel()
		n, err := s.client.Exists(cctx, s.marker).Result()
		return n, s.wrapErr(ctx, "read data-loss marker", err)
	}
	var existing int64
	for start := 0; start < numSlots; start += markerBatch {
		cctx, cancel := s.bound(ctx)
		cmds := make([]*redis.IntCmd, 0, markerBatch)
		_, err := s.client.Pipelined(cctx, func(p redis.Pipeliner) error {
			for slot := start; slot < min(start+markerBatch, numSlots); slot++ {
				cmds = append(cmds, p.Exists(cctx, s.slotMarker(uint16(slot))))
			}
			return nil
		})
		cancel()
		if err != nil {
			return 0, s.wrapErr(ctx, "read data-loss markers", err)
		}
		for _, c := range cmds {
			existing += c.Val()
		}
	}
	return existing, nil
}

// anyNameKey returns a key of a name under the prefix (every such key
// starts "<prefix>:{"; see the package documentation), or "" when there is
// none. It SCANs the keyspace, of every master on a Cluster, until it finds
// one: a Redis holding no key of the prefix is read whole.
func (s *Store) anyNameKey(ctx context.Context) (string, error) {
	pattern := globEscape(s.prefix) + ":{*"
	scan := func(ctx context.Context, c redis.Cmdable) (string, error) {
		var cursor uint64
		for {
			cctx, cancel := s.bound(ctx)
			keys, next, err := c.Scan(cctx, cursor, pattern, 1000).Result()
			cancel()
			if err != nil {
				return "", s.wrapErr(ctx, "scan for keys of the prefix", err)
			}
			if len(keys) > 0 {
				return keys[0], nil
			}
			if cursor = next; cursor == 0 {
				return "", nil
			}
		}
	}
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, s.client)
	}
	found := make(chan string, 1)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		key, err := scan(ctx, c)
		if key != "" {
			select {
			case found <- key:
			default:
			}
		}
		return err
	})
	select {
	case key := <-found:
		return key, nil
	default:
		return "", err
	}
}
