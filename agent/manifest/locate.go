package manifest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"

	sigsjson "sigs.k8s.io/json"

	"github.com/probed/probed/internal/suggest"
)

// This file finds where in a document a decoding error is. The JSON decoder
// reports unknown and duplicate fields with their path, but a value the
// target type rejects (a quantity such as "__DNS__MEMORY__LIMIT__", a string
// where a number belongs) comes without one, so the path is found by
// decoding ever smaller parts of the document into the matching Go types.

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	fieldCache      sync.Map // reflect.Type -> map[string]reflect.Type
)

// jsonFields maps the JSON names of a struct's fields to their types,
// including the fields of embedded (inlined) structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					if _, ok := m[k]; !ok {
						m[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// isLeaf reports whether t decodes itself (Quantity, IntOrString, Time, ...).
func isLeaf(t reflect.Type) bool {
	return t.Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(jsonUnmarshaler)
}

// locate returns the path (below base) of the deepest value in v that does
// not decode into type t, that value, and the error decoding it. It returns
// ok=false when v decodes fine.
func locate(t reflect.Type, v any, base string) (path string, bad any, err error, ok bool) {
	b, mErr := json.Marshal(v)
	if mErr != nil {
		return base, v, mErr, true
	}
	err = sigsjson.UnmarshalCaseSensitivePreserveInts(b, reflect.New(t).Interface())
	if err == nil {
		return "", nil, nil, false
	}
	bt := deref(t)
	if isLeaf(bt) {
		return base, v, err, true
	}
	switch bt.Kind() {
	case reflect.Struct:
		m, isMap := v.(map[string]any)
		if !isMap {
			break
		}
		fields := jsonFields(bt)
		for _, k := range sortedKeys(m) {
			ft, known := fields[k]
			if !known {
				continue
			}
			if p, bv, e, found := locate(ft, m[k], joinPath(base, k)); found {
				return p, bv, e, true
			}
		}
	case reflect.Slice, reflect.Array:
		arr, isArr := v.([]any)
		if !isArr {
			break
		}
		for i, e := range arr {
			if p, bv, er, found := locate(bt.Elem(), e, fmt.Sprintf("%s[%d]", base, i)); found {
				return p, bv, er, true
			}
		}
	case reflect.Map:
		m, isMap := v.(map[string]any)
		if !isMap {
			break
		}
		for _, k := range sortedKeys(m) {
			if p, bv, e, found := locate(bt.Elem(), m[k], base+"["+k+"]"); found {
				return p, bv, e, true
			}
		}
	}
	return base, v, err, true
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// typeAt returns the Go type reached by following segs from t, or nil.
func typeAt(t reflect.Type, segs []segment) reflect.Type {
	for _, s := range segs {
		t = deref(t)
		switch {
		case t.Kind() == reflect.Struct && !s.bracket:
			ft, ok := jsonFields(t)[s.name]
			if !ok {
				return nil
			}
			t = ft
		case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map) && s.bracket:
			t = t.Elem()
		default:
			return nil
		}
	}
	return deref(t)
}

// suggestField returns the field of the struct at parent (a path below t)
// that the unknown key most likely misspells: same name but for case, or at
// most two edits away. "" when none is close.
func suggestField(t reflect.Type, parent []segment, key string) string {
	pt := typeAt(t, parent)
	if pt == nil || pt.Kind() != reflect.Struct {
		return ""
	}
	names := make([]string, 0, 32)
	for k := range jsonFields(pt) {
		names = append(names, k)
	}
	sort.Strings(names)
	return suggest.Closest(key, names)
}

// valueAt follows segs through a generic JSON value.
func valueAt(v any, segs []segment) any {
	for _, s := range segs {
		switch x := v.(type) {
		case map[string]any:
			v = x[s.name]
		case []any:
			i, ok := atoi(s.name)
			if !s.bracket || !ok || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

func atoi(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// containerOf returns the name of the container a field path points into,
// read from the generic document v, or "".
func containerOf(v any, path string) string {
	segs := splitPath(path)
	for i := len(segs) - 1; i > 0; i-- {
		s := segs[i]
		if !s.bracket {
			continue
		}
		switch segs[i-1].name {
		case "containers", "initContainers", "ephemeralContainers":
			if segs[i-1].bracket {
				continue
			}
			if m, ok := valueAt(v, segs[:i+1]).(map[string]any); ok {
				if name, ok := m["name"].(string); ok {
					return name
				}
			}
			return ""
		}
	}
	return ""
}

// placeholder matches template placeholders left unfilled, such as
// __PILLAR__LOCAL__DNS__ (kube-up's sed templates) or {{ .Values.x }}.
var placeholder = regexp.MustCompile(`__[A-Z][A-Z0-9_]*__|\{\{[^}]*\}\}`)

// describeValue renders a bad value for an error message.
func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 80 {
			return fmt.Sprintf("%q...", x[:80])
		}
		return fmt.Sprintf("%q", x)
	case nil:
		return "null"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}
