package main

import (
	"bytes"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/coordinator-dev/coordinator/internal/app"
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
				c.runner.Parallelism == 5 && c.membership.TTL == time.Second && c.runner.DiscoveryInterval == time.Second &&
				c.runner.ProbeInterval == 500*time.Millisecond && c.membership.CheckInterval == 0 &&
				c.membership.Election == "housekeeper/leader" && c.membership.ID == c.instanceID && c.instanceID != "" && c.redisURL == "redis://127.0.0.1:6379/0" &&
				!c.coordinatorTLS && c.log.Level == slog.LevelInfo && c.log.Format == "text"
		}, ""},
		{"environment", nil, map[string]string{
			"HOUSEKEEPER_COORDINATOR_ADDR": "coord:7400", "HOUSEKEEPER_REDIS_URL": "redis+cluster://a:1,b:2",
			"HOUSEKEEPER_PREFIX": "dk", "HOUSEKEEPER_INSTANCE_ID": "hk-1", "HOUSEKEEPER_BATCH_SIZE": "50",
			"HOUSEKEEPER_PARALLELISM": "8", "HOUSEKEEPER_LEASE_TTL": "2s", "HOUSEKEEPER_LEASE_NAMESPACE": "team-a",
			"HOUSEKEEPER_LOG_LEVEL": "debug", "HOUSEKEEPER_LOG_FORMAT": "json",
		}, func(c config) bool {
			return c.coordinatorAddr == "coord:7400" && c.redisURL == "redis+cluster://a:1,b:2" && c.runner.Prefix == "dk" &&
				c.instanceID == "hk-1" && c.runner.BatchSize == 50 && c.runner.Parallelism == 8 &&
				c.membership.TTL == 2*time.Second && c.membership.Namespace == "team-a" && c.membership.ID == "hk-1" &&
				c.log.Level == slog.LevelDebug && c.log.Format == "json"
		}, ""},
		{"a flag wins", []string{"-batch-size", "10", "-redis-url", "redis://flag:1/0", "-coordinator-token", "flag", "-coordinator-tls"},
			map[string]string{"HOUSEKEEPER_BATCH_SIZE": "50", "HOUSEKEEPER_REDIS_URL": "redis://env:1/0", "HOUSEKEEPER_COORDINATOR_TOKEN": "env"},
			func(c config) bool {
				return c.runner.BatchSize == 10 && c.redisURL == "redis://flag:1/0" && c.coordinatorToken == "flag"
			}, ""},
		{"token over TLS", nil, map[string]string{"HOUSEKEEPER_COORDINATOR_TOKEN": "s3cret", "HOUSEKEEPER_COORDINATOR_TLS": "true"}, func(c config) bool {
			return c.coordinatorToken == "s3cret" && c.coordinatorTLS && !c.insecureToken
		}, ""},
		{"a CA file implies TLS", []string{"-coordinator-tls-ca", "ca.pem", "-coordinator-token", "s3cret"}, nil, func(c config) bool {
			return c.coordinatorTLS && c.tls.CA == "ca.pem"
		}, ""},
		{"a client certificate implies TLS", []string{"-coordinator-tls-cert", "c.pem", "-coordinator-tls-key", "k.pem"}, nil, func(c config) bool {
			return c.coordinatorTLS && c.tls.Cert == "c.pem" && c.tls.Key == "k.pem"
		}, ""},
		{"token over plaintext when allowed", nil, map[string]string{
			"HOUSEKEEPER_COORDINATOR_TOKEN": "s3cret", "HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN": "true",
		}, func(c config) bool {
			return c.coordinatorToken == "s3cret" && !c.coordinatorTLS && c.insecureToken
		}, ""},
		{"token over plaintext", nil, map[string]string{"HOUSEKEEPER_COORDINATOR_TOKEN": "s3cret"}, nil, "coordinator-insecure-token"},
		{"certificate without key", []string{"-coordinator-tls-cert", "c.pem"}, nil, nil, "go together"},
		{"malformed boolean env", nil, map[string]string{"HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN": "maybe"}, nil, "HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN"},
		{"zero batch size", []string{"-batch-size", "0"}, nil, nil, "batch-size"},
		{"zero lease ttl", []string{"-lease-ttl", "0s"}, nil, nil, "lease-ttl"},
		{"zero discovery interval", []string{"-discovery-interval", "0s"}, nil, nil, "discovery-interval"},
		{"zero probe interval", []string{"-probe-interval", "0s"}, nil, nil, "probe-interval"},
		{"negative membership check", []string{"-membership-check", "-1s"}, nil, nil, "membership-check"},
		{"instance id with a slash", []string{"-instance-id", "a/b"}, nil, nil, "instance-id"},
		{"intervals from the environment", nil, map[string]string{
			"HOUSEKEEPER_DISCOVERY_INTERVAL": "3s", "HOUSEKEEPER_PROBE_INTERVAL": "2s",
			"HOUSEKEEPER_MEMBERSHIP_CHECK": "100ms", "HOUSEKEEPER_ELECTION": "hk/lead",
		}, func(c config) bool {
			return c.runner.DiscoveryInterval == 3*time.Second && c.runner.ProbeInterval == 2*time.Second &&
				c.membership.CheckInterval == 100*time.Millisecond && c.membership.Election == "hk/lead"
		}, ""},
		{"storage off by default, with Deckard's names", nil, nil, func(c config) bool {
			return c.storage.URI == "" && c.storage.Database == "deckard" && c.storage.Collection == "queue" &&
				c.storage.ConfigurationCollection == "queue_configuration" && c.runner.Storage.Interval == time.Second &&
				c.runner.Storage.MetricsInterval == time.Minute && c.runner.Storage.TTLBatch == 10000 && c.runner.Storage.RecoveryBatch == 4000
		}, ""},
		{"storage from the environment", nil, map[string]string{
			"HOUSEKEEPER_STORAGE_URI": "mongodb://u:p@mongo:27017/?replicaSet=rs0", "HOUSEKEEPER_MONGO_DATABASE": "dk",
			"HOUSEKEEPER_MONGO_COLLECTION": "msgs", "HOUSEKEEPER_STORAGE_INTERVAL": "250ms", "HOUSEKEEPER_TTL_BATCH": "500",
		}, func(c config) bool {
			return c.storage.URI == "mongodb://u:p@mongo:27017/?replicaSet=rs0" && c.storage.Database == "dk" && c.storage.Collection == "msgs" &&
				c.runner.Storage.Interval == 250*time.Millisecond && c.runner.Storage.TTLBatch == 500
		}, ""},
		{"a storage uri that is not MongoDB's", []string{"-storage-uri", "postgres://x"}, nil, nil, "storage-uri"},
		{"zero storage interval", []string{"-storage-interval", "0s"}, nil, nil, "storage-interval"},
		{"zero ttl batch", []string{"-ttl-batch", "0"}, nil, nil, "ttl-batch"},
		{"bad redis url", []string{"-redis-url", "http://x"}, nil, nil, "redis-url"},
		{"bad redis url from env", nil, map[string]string{"HOUSEKEEPER_REDIS_URL": "http://x"}, nil, "redis-url"},
		{"bad log format", []string{"-log-format", "xml"}, nil, nil, "log-format"},
		{"bad log level", nil, map[string]string{"HOUSEKEEPER_LOG_LEVEL": "loud"}, nil, "log-level"},
		{"-version, whatever the environment holds", []string{"-version"}, map[string]string{"HOUSEKEEPER_LEASE_TTL": "soon"}, func(c config) bool {
			return c.printVersion
		}, ""},
		{"malformed env", nil, map[string]string{"HOUSEKEEPER_PARALLELISM": "lots"}, nil, "HOUSEKEEPER_PARALLELISM"},
		{"tracing off by default", nil, nil, func(c config) bool { return !c.tracing.Enabled }, ""},
		{"tracing on with an OTLP endpoint", nil, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, func(c config) bool {
			return c.tracing.Enabled && c.tracing.Protocol == "http/protobuf"
		}, ""},
		{"tracing: a bad protocol", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grcp"}, nil, "OTEL_EXPORTER_OTLP_PROTOCOL"},
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

// -help names every variable but prints no secret taken from the
// environment, and is not an error.
func TestHelpNamesTheVariablesAndHidesSecrets(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("housekeeper", flag.ContinueOnError)
	fs.SetOutput(&out)
	env := map[string]string{
		"HOUSEKEEPER_COORDINATOR_TOKEN": "token-s3cret",
		"HOUSEKEEPER_REDIS_URL":         "redis://:password-s3cret@deckard:6379/0",
		"HOUSEKEEPER_STORAGE_URI":       "mongodb://u:mongo-s3cret@mongo:27017/",
	}
	_, err := parseConfig(fs, []string{"-help"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if code := app.ParseError(io.Discard, "housekeeper", err); code != app.ExitOK {
		t.Errorf("-help: exit status %d (err %v), want %d", code, err, app.ExitOK)
	}
	help := out.String()
	for _, secret := range []string{"token-s3cret", "password-s3cret", "mongo-s3cret"} {
		if strings.Contains(help, secret) {
			t.Errorf("-help prints %q:\n%s", secret, help)
		}
	}
	for _, want := range []string{
		"$HOUSEKEEPER_COORDINATOR_TOKEN", "$HOUSEKEEPER_COORDINATOR_INSECURE_TOKEN", "$HOUSEKEEPER_COORDINATOR_TLS]",
		"$HOUSEKEEPER_COORDINATOR_TLS_CERT", "$HOUSEKEEPER_REDIS_URL", "$HOUSEKEEPER_STORAGE_URI", "$HOUSEKEEPER_LOG_LEVEL", "$HOUSEKEEPER_LOG_FORMAT",
		"plaintext",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("-help does not mention %s:\n%s", want, help)
		}
	}
}
