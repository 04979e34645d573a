// Package output is kubectl's -o for probed's commands (`probed status`,
// `probed check`, `probed version`): the format names (table, the default;
// wide, the table with more columns; json; yaml) and the writing of a
// command's document as JSON or YAML. YAML is produced from the JSON
// encoding of the same Go value (sigs.k8s.io/yaml, as kubectl does), so
// the two formats always carry the same fields under the same names; the
// shapes are documented in docs/operations.md.
package output

import (
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Format is an -o value.
type Format string

// The formats, named as kubectl names them.
const (
	Table Format = "table"
	Wide  Format = "wide"
	JSON  Format = "json"
	YAML  Format = "yaml"
)

// Parse reads an -o value: table (or ""), wide, json or yaml. The error
// names the flag and the formats.
func Parse(s string) (Format, error) {
	switch Format(s) {
	case "", Table:
		return Table, nil
	case Wide, JSON, YAML:
		return Format(s), nil
	}
	return "", fmt.Errorf("-o/--output %q: want table, wide, json or yaml", s)
}

// Document reports whether f writes a document (json, yaml) rather than a
// table.
func (f Format) Document() bool { return f == JSON || f == YAML }

// Write writes v as a JSON document (indented by two spaces, one trailing
// newline) or as YAML from that JSON encoding. Any other format is an
// error: tables are the commands' own.
func Write(w io.Writer, f Format, v any) error {
	switch f {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case YAML:
		data, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	return fmt.Errorf("output: %q is not a document format", f)
}

// APIVersion is the apiVersion of probed's documents (`probed status` and
// `probed check` with -o json|yaml).
const APIVersion = "probed.io/v1alpha1"
