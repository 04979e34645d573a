package statuspage

import (
	"fmt"
	"html/template"
	"reflect"
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
