package main

import (
	"encoding"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/zmqguard/zmqguard/coordinator"
	"github.com/zmqguard/zmqguard/handshake"
	"github.com/zmqguard/zmqguard/kvevents"
	"github.com/zmqguard/zmqguard/kvindex"
	"github.com/zmqguard/zmqguard/kvindex/redisstore"
	"github.com/zmqguard/zmqguard/loop"
	"github.com/zmqguard/zmqguard/outputs"
	"github.com/zmqguard/zmqguard/socket"
	"github.com/zmqguard/zmqguard/zmtpguard"
)

// snakeKey is the one JSON key style: lower case words joined by _.
var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// jsonKeys returns every object key encoding/json can write for a value of
// type t (all fields, omitempty or not, through pointers, slices, arrays
// and map values), each as the path it is found at. A type with its own
// MarshalJSON or MarshalText is its own business, not walked; map keys are
// data, not keys of a style.
func jsonKeys(t reflect.Type) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	marshaler := reflect.TypeFor[json.Marshaler]()
	texter := reflect.TypeFor[encoding.TextMarshaler]()
	var walk func(t reflect.Type, path string)
	var fields func(t reflect.Type, path string)
	fields = func(t reflect.Type, path string) {
		for f := range t.Fields() {
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct && !ft.Implements(marshaler) && !reflect.PointerTo(ft).Implements(marshaler) {
					fields(ft, path) // promoted
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			out = append(out, path+name)
			walk(f.Type, path+name+".")
		}
	}
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) ||
			t.Implements(texter) || reflect.PointerTo(t).Implements(texter) {
			return
		}
		switch t.Kind() {
		case reflect.Slice, reflect.Array, reflect.Map:
			walk(t.Elem(), path)
		case reflect.Struct:
			if seen[t] {
				return
			}
			seen[t] = true
			fields(t, path)
			seen[t] = false
		}
	}
	walk(t, "")
	return out
}

// jsonRoots are the types written as JSON: the CLI's exit lines, HTTP
// bodies and debug endpoint, and every library Stats a program marshals.
var jsonRoots = []reflect.Type{
	reflect.TypeFor[coordinatorReport](),
	reflect.TypeFor[listenerReport](),
	reflect.TypeFor[sinkReport](),
	reflect.TypeFor[probeReportJSON](),
	reflect.TypeFor[scanJSON](),
	reflect.TypeFor[kvCountersLine](),
	reflect.TypeFor[debugVars](),
	reflect.TypeFor[kvIndexCounters](),
	reflect.TypeFor[kvScoreRequest](),
	reflect.TypeFor[kvScoreResponse](),

	reflect.TypeFor[coordinator.Stats](),
	reflect.TypeFor[handshake.ListenerStats](),
	reflect.TypeFor[kvevents.SourceStats](),
	reflect.TypeFor[kvevents.PublisherStats](),
	reflect.TypeFor[kvindex.Stats](),
	reflect.TypeFor[kvindex.BackendStats](),
	reflect.TypeFor[redisstore.Stats](),
	reflect.TypeFor[loop.Stats](),
	reflect.TypeFor[outputs.Stats](),
	reflect.TypeFor[socket.Stats](),
	reflect.TypeFor[zmtpguard.Stats](),
}

// TestJSONKeysSnakeCase: every key of every JSON the repository writes is
// snake_case ("apply_errors", never "Batches" beside it).
func TestJSONKeysSnakeCase(t *testing.T) {
	for _, rt := range jsonRoots {
		keys := jsonKeys(rt)
		if len(keys) == 0 {
			t.Errorf("%v: no keys found", rt)
		}
		for _, k := range keys {
			last := k[strings.LastIndex(k, ".")+1:]
			if !snakeKey.MatchString(last) {
				t.Errorf("%v: key %s is not snake_case", rt, k)
			}
		}
	}
}

// TestJSONKeysWalk checks the walker on a small type: tags, promoted
// fields, omitempty, pointers, slices and map values are followed, a
// MarshalJSON type and a "-" field are not.
func TestJSONKeysWalk(t *testing.T) {
	type inner struct {
		Deep int `json:"deep_key"`
	}
	type embedded struct {
		Promoted int
	}
	type root struct {
		embedded
		Tagged   int               `json:"tagged,omitempty"`
		Plain    *inner            // no tag: its Go name
		List     []inner           `json:"list"`
		ByName   map[string]*inner `json:"by_name"`
		Skipped  int               `json:"-"`
		Marshal  json.RawMessage   `json:"raw"`
		unexport int
	}
	_ = root{}.unexport
	got := strings.Join(jsonKeys(reflect.TypeFor[root]()), " ")
	want := "Promoted tagged Plain Plain.deep_key list list.deep_key by_name by_name.deep_key raw"
	if got != want {
		t.Fatalf("jsonKeys = %q, want %q", got, want)
	}
}
