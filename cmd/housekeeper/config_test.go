package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(config) bool
		wantErr string
	}{
		{"defaults", nil, nil, func(c config) bool {
			return c.coordinatorAddr == "127.0.0.1:7400" && c.runner.Prefix == "deckard_v1" && c.runner.BatchSize == 1000 &&
				c.runner.Parallelism == 5 && c.runner.LeaseTTL == 5*time.Second && c.runner.UnlockInterval == time.Second &&
				c.election == "housekeeper/leader" && c.instanceID != ""
		}, ""},
		{"environment", nil, map[string]string{
			"HOUSEKEEPER_COORDINATOR_ADDR": "coord:7400", "HOUSEKEEPER_REDIS_URL": "redis+cluster://a:1,b:2",
			"HOUSEKEEPER_PREFIX": "dk", "HOUSEKEEPER_INSTANCE_ID": "hk-1", "HOUSEKEEPER_BATCH_SIZE": "50",
			"HOUSEKEEPER_PARALLELISM": "8", "HOUSEKEEPER_LEASE_TTL": "2s", "HOUSEKEEPER_LEASE_NAMESPACE": "team-a",
		}, func(c config) bool {
			return c.coordinatorAddr == "coord:7400" && c.redisURL == "redis+cluster://a:1,b:2" && c.runner.Prefix == "dk" &&
				c.instanceID == "hk-1" && c.runner.BatchSize == 50 && c.runner.Parallelism == 8 &&
				c.runner.LeaseTTL == 2*time.Second && c.election == "team-a/housekeeper/leader"
		}, ""},
		{"a flag wins", []string{"-batch-size", "10"}, map[string]string{"HOUSEKEEPER_BATCH_SIZE": "50"}, func(c config) bool {
			return c.runner.BatchSize == 10
		}, ""},
		{"zero batch size", []string{"-batch-size", "0"}, nil, nil, "batch-size"},
		{"zero lease ttl", []string{"-lease-ttl", "0s"}, nil, nil, "lease-ttl"},
		{"bad redis url", []string{"-redis-url", "http://x"}, nil, nil, "redis-url"},
		{"bad log format", []string{"-log-format", "xml"}, nil, nil, "log-format"},
		{"malformed env", nil, map[string]string{"HOUSEKEEPER_PARALLELISM": "lots"}, nil, "HOUSEKEEPER_PARALLELISM"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("housekeeper", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg, err := parseConfig(fs, tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !tc.check(cfg) {
				t.Fatalf("parseConfig = %+v, %v", cfg, err)
			}
		})
	}
}
