package deploy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// queryRefs is what a PromQL query names: the metrics it selects, the labels
// of its selectors' matchers (by metric), and the labels of its by, without,
// on, ignoring and group_ clauses.
type queryRefs struct {
	metrics  []string
	matchers map[string][]string // metric -> labels its matchers name
	grouping []string
}

// promKeywords are the identifiers of PromQL that name no metric.
var promKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true,
}

// groupingClauses take a list of label names in parentheses.
var groupingClauses = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

type promToken struct {
	kind byte // 'i' identifier, 'n' number or duration, 's' string, 'v' Grafana variable, else the character
	text string
}

// promTokens splits a query into tokens. It knows enough of PromQL for the
// queries of this repository's dashboard and rules, not all of it.
func promTokens(q string) ([]promToken, error) {
	var toks []promToken
	rs := []rune(q)
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case unicode.IsSpace(r):
			i++
		case r == '"' || r == '\'' || r == '`':
			j := i + 1
			for ; j < len(rs) && rs[j] != r; j++ {
				if rs[j] == '\\' && r != '`' {
					j++
				}
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, promToken{'s', string(rs[i+1 : j])})
			i = j + 1
		case r == '$':
			j := i + 1
			for j < len(rs) && (rs[j] == '_' || unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j])) {
				j++
			}
			toks = append(toks, promToken{'v', string(rs[i:j])})
			i = j
		case unicode.IsDigit(r) || (r == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1])):
			j := i
			for j < len(rs) && (unicode.IsDigit(rs[j]) || unicode.IsLetter(rs[j]) || rs[j] == '.') {
				j++
			}
			toks = append(toks, promToken{'n', string(rs[i:j])})
			i = j
		case r == '_' || r == ':' || unicode.IsLetter(r):
			j := i
			for j < len(rs) && (rs[j] == '_' || rs[j] == ':' || unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j])) {
				j++
			}
			toks = append(toks, promToken{'i', string(rs[i:j])})
			i = j
		default:
			toks = append(toks, promToken{byte(r), string(r)})
			i++
		}
	}
	return toks, nil
}

// promQueryRefs returns what q names.
func promQueryRefs(q string) (queryRefs, error) {
	toks, err := promTokens(q)
	if err != nil {
		return queryRefs{}, err
	}
	refs := queryRefs{matchers: map[string][]string{}}
	next := func(i int) byte {
		if i+1 < len(toks) {
			return toks[i+1].kind
		}
		return 0
	}
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		switch {
		case tk.kind == '[': // a range or a subquery's duration
			for i < len(toks) && toks[i].kind != ']' {
				i++
			}
		case tk.kind == '{': // matchers of the selector before it
			metric := ""
			if i > 0 && toks[i-1].kind == 'i' {
				metric = toks[i-1].text
			}
			for i++; i < len(toks) && toks[i].kind != '}'; i++ {
				if toks[i].kind == 'i' && (next(i) == '=' || next(i) == '!') {
					refs.matchers[metric] = append(refs.matchers[metric], toks[i].text)
				}
			}
			if i == len(toks) {
				return refs, fmt.Errorf("unterminated matchers in %q", q)
			}
		case tk.kind == 'i' && groupingClauses[tk.text] && next(i) == '(':
			for i += 2; i < len(toks) && toks[i].kind != ')'; i++ {
				if toks[i].kind == 'i' {
					refs.grouping = append(refs.grouping, toks[i].text)
				}
			}
		case tk.kind == 'i' && (next(i) == '(' || next(i) == 'i' && (toks[i+1].text == "by" || toks[i+1].text == "without")):
			// A function, or an aggregation with its clause first.
		case tk.kind == 'i' && !promKeywords[tk.text]:
			if !slices.Contains(refs.metrics, tk.text) {
				refs.metrics = append(refs.metrics, tk.text)
			}
		}
	}
	if len(refs.metrics) == 0 {
		return refs, fmt.Errorf("%q names no metric", q)
	}
	return refs, nil
}

func TestPromQueryRefs(t *testing.T) {
	for _, tc := range []struct {
		q        string
		metrics  []string
		matchers map[string][]string
		grouping []string
	}{
		{`coordinator_store_up == 0`, []string{"coordinator_store_up"}, map[string][]string{}, nil},
		{`histogram_quantile(0.99, sum by (grpc_method, le) (rate(grpc_server_handling_seconds_bucket{grpc_service="coordinator.v1.Coordinator", instance=~"$instance"}[$__rate_interval])))`,
			[]string{"grpc_server_handling_seconds_bucket"}, map[string][]string{"grpc_server_handling_seconds_bucket": {"grpc_service", "instance"}}, []string{"grpc_method", "le"}},
		{`increase(a_total[10m]) > 0 or (a_total > 0 unless a_total offset 10m) or sum without (outcome) (rate(b_total{outcome="quarantined"}[5m])) > 0`,
			[]string{"a_total", "b_total"}, map[string][]string{"b_total": {"outcome"}}, []string{"outcome"}},
		{`count by (prefix) (x{p!~"a,b}"} == 0) or on (prefix) (0 * max by (prefix) (x))`,
			[]string{"x"}, map[string][]string{"x": {"p"}}, []string{"prefix", "prefix", "prefix"}},
		{`sum(rate(x[5m])) by (job) / 1e3`, []string{"x"}, map[string][]string{}, []string{"job"}},
	} {
		refs, err := promQueryRefs(tc.q)
		if err != nil {
			t.Errorf("%s: %v", tc.q, err)
			continue
		}
		if !slices.Equal(refs.metrics, tc.metrics) || fmt.Sprint(refs.matchers) != fmt.Sprint(tc.matchers) || !slices.Equal(refs.grouping, tc.grouping) {
			t.Errorf("%s:\n got %v %v %v\nwant %v %v %v", tc.q, refs.metrics, refs.matchers, refs.grouping, tc.metrics, tc.matchers, tc.grouping)
		}
	}
	if _, err := promQueryRefs(`sum(rate(x{a="b}[5m]))`); err == nil || !strings.Contains(err.Error(), "unterminated") {
		t.Errorf("an unterminated string: %v", err)
	}
}
