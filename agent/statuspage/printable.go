package statuspage

import (
	"fmt"
	"html/template"
	"reflect"
	"strings"
	"text/template/parse"

	"github.com/probed/probed/agent/output"
)

// printableFunc is the template function every printed value passes
// (printableActions): a string, a string-kinded value, an error or a
// Stringer is shown through output.Printable, the escaping rule `probed
// status` prints with (a raw ESC, BEL or bidi override becomes "\x1b",
// "\a", "\u202e"); numbers, booleans and times are returned as they are.
func printableFunc(v any) any {
	switch x := v.(type) {
	case nil:
		return v
	case wrapped:
		return template.HTML(x) // made by breakable, from printable text
	case string:
		return output.Printable(x)
	case error:
		return output.Printable(x.Error())
	case fmt.Stringer:
		return output.Printable(x.String())
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.String {
		return output.Printable(rv.String())
	}
	return v
}

// wrapped is text that breakable made printable and HTML-escaped, with
// <wbr> line-break opportunities after its separators.
type wrapped template.HTML

// wrapAfter are the characters a long target, path or message may wrap
// after: path and query separators. A line never breaks inside a word,
// a host:port or a number (the stylesheet breaks a word only when it
// alone is wider than its column).
const wrapAfter = "/?&=,;"

// breakable is the template function of long values without spaces
// (targets, file names, container IDs, messages): the value made
// printable (output.Printable) and HTML-escaped, with a <wbr> after each
// run of wrapAfter characters, so that a browser wraps it there and not
// mid-word.
func breakable(v any) wrapped {
	s, _ := printableFunc(v).(string)
	if s == "" {
		s = fmt.Sprint(printableFunc(v))
	}
	var b strings.Builder
	for i, r := range s {
		b.WriteString(template.HTMLEscapeString(string(r)))
		if strings.ContainsRune(wrapAfter, r) && i+1 < len(s) && !strings.ContainsRune(wrapAfter, rune(s[i+1])) {
			b.WriteString("<wbr>")
		}
	}
	return wrapped(b.String())
}

// printableActions makes every value the page prints pass printableFunc: it
// appends the "printable" function to the pipeline of every action of every
// template of t ({{.Error}} runs as {{.Error | printable}}), before
// html/template escapes the result for its context at the first Execute. A
// field added to a template later cannot forget the rule. Actions that only
// declare a variable ({{$pod := .}}) print nothing and are left alone.
func printableActions(t *template.Template) {
	for _, tt := range t.Templates() {
		if tt.Tree != nil && tt.Tree.Root != nil {
			addPrintable(tt.Tree.Root)
		}
	}
}

func addPrintable(n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			addPrintable(c)
		}
	case *parse.ActionNode:
		if len(n.Pipe.Decl) == 0 {
			// As html/template adds its own escapers to a pipeline
			// (html/template's newIdentCmd).
			n.Pipe.Cmds = append(n.Pipe.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: n.Pos,
				Args: []parse.Node{parse.NewIdentifier("printable").SetTree(nil).SetPos(n.Pos)}})
		}
	case *parse.IfNode:
		addPrintable(n.List)
		addPrintable(n.ElseList)
	case *parse.RangeNode:
		addPrintable(n.List)
		addPrintable(n.ElseList)
	case *parse.WithNode:
		addPrintable(n.List)
		addPrintable(n.ElseList)
	}
}
