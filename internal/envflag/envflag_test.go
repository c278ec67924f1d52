package envflag

import (
	"flag"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFlagsTakeDefaultsFromTheEnvironment(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    string
		wantErr string
	}{
		{"built-in defaults", nil, nil, "s=def d=1s n=7", ""},
		{"environment", map[string]string{"X_S": "env", "X_D": "2m", "X_N": "9"}, nil, "s=env d=2m0s n=9", ""},
		{"a flag wins", map[string]string{"X_S": "env", "X_D": "2m"}, []string{"-s", "flag", "-d", "3s"}, "s=flag d=3s n=7", ""},
		{"malformed duration names the variable", map[string]string{"X_D": "soon"}, nil, "", "$X_D"},
		{"malformed int names the variable", map[string]string{"X_N": "many"}, nil, "", "$X_N"},
		{"stray argument", nil, []string{"extra"}, "", `unexpected argument "extra"`},
		{"a variable set empty empties a string", map[string]string{"X_S": "", "X_D": ""}, nil, "s= d=1s n=7", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			v := New(fs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			var s string
			var d time.Duration
			var n int
			v.String(&s, "s", "X_S", "def", "a string")
			v.Duration(&d, "d", "X_D", time.Second, "a duration")
			v.Int(&n, "n", "X_N", 7, "an int")
			err := v.Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := "s=" + s + " d=" + d.String() + " n=" + itoa(n); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestUsageNamesTheVariable(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	var s string
	New(fs, func(string) (string, bool) { return "", false }).String(&s, "listen", "APP_LISTEN", ":1", "where to listen")
	fs.PrintDefaults()
	if !strings.Contains(b.String(), "[$APP_LISTEN]") {
		t.Fatalf("usage %q does not name $APP_LISTEN", b.String())
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestOptionalDurationKnowsWhetherItWasGiven(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		want    time.Duration
		wantSet bool
	}{
		{"not given", nil, nil, 0, false},
		{"variable", map[string]string{"X_Q": "0s"}, nil, 0, true},
		{"flag", map[string]string{"X_Q": "5s"}, []string{"-q", "2s"}, 2 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			var d time.Duration
			var set bool
			v := New(fs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			v.OptionalDuration(&d, &set, "q", "X_Q", "a duration derived elsewhere when not given")
			if err := v.Parse(tc.args); err != nil || d != tc.want || set != tc.wantSet {
				t.Fatalf("got %v set %v (%v); want %v set %v", d, set, err, tc.want, tc.wantSet)
			}
		})
	}
}

func TestBoolAndSecret(t *testing.T) {
	tests := []struct {
		name       string
		env        map[string]string
		args       []string
		wantBool   bool
		wantSecret string
		wantErr    string
	}{
		{"defaults", nil, nil, false, "def", ""},
		{"environment", map[string]string{"X_B": "true", "X_SECRET": "from-env"}, nil, true, "from-env", ""},
		{"a flag wins", map[string]string{"X_B": "true", "X_SECRET": "from-env"}, []string{"-b=false", "-secret", "from-flag"}, false, "from-flag", ""},
		{"a variable set empty empties a secret", map[string]string{"X_SECRET": ""}, nil, false, "", ""},
		{"malformed bool names the variable", map[string]string{"X_B": "maybe"}, nil, false, "", "$X_B"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			v := New(fs, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			var b bool
			var secret string
			v.Bool(&b, "b", "X_B", false, "a bool")
			v.Secret(&secret, "secret", "X_SECRET", "def", "a secret")
			err := v.Parse(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || b != tc.wantBool || secret != tc.wantSecret {
				t.Fatalf("b=%v secret=%q err=%v; want b=%v secret=%q", b, secret, err, tc.wantBool, tc.wantSecret)
			}
		})
	}
}

func TestUsageNeverShowsASecretsVariable(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var b strings.Builder
	fs.SetOutput(&b)
	var s string
	New(fs, func(string) (string, bool) { return "hunter2", true }).Secret(&s, "token", "APP_TOKEN", "", "a token")
	fs.PrintDefaults()
	if strings.Contains(b.String(), "hunter2") || !strings.Contains(b.String(), "[$APP_TOKEN]") {
		t.Fatalf("usage %q shows the secret or omits its variable", b.String())
	}
}
