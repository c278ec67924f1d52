package redisstore

import (
	"context"

	"github.com/coordinator-dev/coordinator/internal/redisurl"
)

// NewFromURL connects to the Redis deployment that url names (see the
// package documentation for the accepted forms) and returns a Store owning
// the client: Close closes it.
func NewFromURL(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	client, err := redisurl.NewClient(rawURL)
	if err != nil {
		return nil, err
	}
	s, err := New(ctx, client, opts)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.ownsClient = true
	return s, nil
}
