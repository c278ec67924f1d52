package envflag

import (
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Set adds env-backed flags to a flag.FlagSet.
type Set struct {
	fs      *flag.FlagSet
	lookup  func(string) (string, bool)
	errs    []error
	secrets []secret
}

// secret is a string flag whose variable is applied after parsing, so that
// -help never prints it.
type secret struct {
	p         *string
	name, env string
}

// New returns a Set defining flags on fs, reading variables with lookup
// (os.LookupEnv), so that a variable set to "" counts: it empties a string.
func New(fs *flag.FlagSet, lookup func(string) (string, bool)) *Set {
	return &Set{fs: fs, lookup: lookup}
}

func (s *Set) value(env, def string) string {
	if v, ok := s.lookup(env); ok {
		return v
	}
	return def
}

// nonEmpty is the variable's value when it is set to something.
func (s *Set) nonEmpty(env string) string {
	v, _ := s.lookup(env)
	return v
}

func usage(text, env string) string { return fmt.Sprintf("%s [$%s]", text, env) }

// String defines a string flag.
func (s *Set) String(p *string, name, env, def, text string) {
	s.fs.StringVar(p, name, s.value(env, def), usage(text, env))
}

// Secret defines a string flag for a value that must not be printed, such
// as a token or a URL that may hold a password: -help shows def, never the
// variable's value, which applies after parsing unless the flag was given.
func (s *Set) Secret(p *string, name, env, def, text string) {
	s.fs.StringVar(p, name, def, usage(text, env))
	s.secrets = append(s.secrets, secret{p: p, name: name, env: env})
}

// Bool defines a boolean flag; a malformed variable is an error of Parse.
func (s *Set) Bool(p *bool, name, env string, def bool, text string) {
	if v := s.nonEmpty(env); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("$%s: %w", env, err))
		} else {
			def = b
		}
	}
	s.fs.BoolVar(p, name, def, usage(text, env))
}

// Duration defines a duration flag; a malformed variable is an error of
// Parse.
func (s *Set) Duration(p *time.Duration, name, env string, def time.Duration, text string) {
	if v := s.nonEmpty(env); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("$%s: %w", env, err))
		} else {
			def = d
		}
	}
	s.fs.DurationVar(p, name, def, usage(text, env))
}

// Int defines an int flag; a malformed variable is an error of Parse.
func (s *Set) Int(p *int, name, env string, def int, text string) {
	if v := s.nonEmpty(env); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("$%s: %w", env, err))
		} else {
			def = n
		}
	}
	s.fs.IntVar(p, name, def, usage(text, env))
}

// Parse parses args and fails on a malformed variable or a stray argument.
func (s *Set) Parse(args []string) error {
	if err := s.fs.Parse(args); err != nil {
		return err
	}
	if len(s.errs) > 0 {
		return s.errs[0]
	}
	if s.fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", s.fs.Arg(0))
	}
	given := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, sec := range s.secrets {
		if v, ok := s.lookup(sec.env); ok && !given[sec.name] {
			*sec.p = v
		}
	}
	return nil
}

// optionalDuration is a duration flag that remembers whether it was given,
// and shows no default in -help.
type optionalDuration struct {
	d   *time.Duration
	set *bool
}

func (o optionalDuration) String() string {
	if o.set == nil || !*o.set {
		return ""
	}
	return o.d.String()
}

func (o optionalDuration) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		return err
	}
	*o.d, *o.set = d, true
	return nil
}

// OptionalDuration defines a duration flag without a default of its own:
// *set reports whether the flag or the variable gave one, so that the
// caller can derive a default from other settings.
func (s *Set) OptionalDuration(p *time.Duration, set *bool, name, env, text string) {
	o := optionalDuration{d: p, set: set}
	if v := s.nonEmpty(env); v != "" {
		if err := o.Set(v); err != nil {
			s.errs = append(s.errs, fmt.Errorf("$%s: %w", env, err))
		}
	}
	s.fs.Var(o, name, usage(text, env))
}
